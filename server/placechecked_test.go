package server

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
)

// A Parquet stream's batch keeps what its check found for the encoder
// (staging.Txn.AppendChecked): each piece of a batch split over
// partitions gets its own records' values, in order, as Fields gives them
// for those bytes; a stream whose files are not Parquet keeps nothing.
func TestPlaceKeepsChecked(t *testing.T) {
	var data []byte
	for i := range 9 {
		data = fmt.Appendf(data, `{"s":"s%d","q":%d,"i":%d,"n":%d,"p":"x\"%d"}`+"\n", i%3, i*7, -i, 1<<40+i, i)
	}
	w := Write{Stream: "pq", Ext: "ndjson", Data: data, Records: 9}
	for _, tt := range []struct {
		conf   streamconf.Config
		pieces int
		kept   bool
	}{
		{streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema}, 1, true},
		{streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema, Partition: "s={field:s}"}, 3, true},
		{streamconf.Config{Format: streamconf.FormatNDJSON, Schema: testSchema, Compression: streamconf.CompressionZstd, Partition: "s={field:s}"}, 3, false},
	} {
		sc, err := compileConf(tt.conf)
		if err != nil {
			t.Fatal(err)
		}
		p := sc.place(time.Now(), &w, placeLimits{})
		if p.err != nil || len(p.pieces) != tt.pieces {
			t.Fatalf("%+v: %d pieces, %v", tt.conf, len(p.pieces), p.err)
		}
		chk := testSchema.NewChecker(true)
		out := make([]streamconf.Value, len(testSchema.Fields))
		for _, pc := range p.pieces {
			if !tt.kept {
				if pc.checked != nil {
					t.Fatalf("%+v: values kept", tt.conf)
				}
				continue
			}
			if pc.checked == nil || pc.checked.Len() != pc.records || pc.checked.Schema != sc.enc.Schema {
				t.Fatalf("%+v: piece %s: %v for %d records", tt.conf, pc.part, pc.checked, pc.records)
			}
			for i, rec := range bytes.Split(bytes.TrimSuffix(pc.data, []byte{'\n'}), []byte{'\n'}) {
				want, err := chk.Fields(rec)
				if err != nil {
					t.Fatal(err)
				}
				if !pc.checked.Value(i, rec, out) {
					t.Fatalf("piece %s record %d: no values", pc.part, i)
				}
				for j := range want {
					if !bytes.Equal(out[j].Raw, want[j].Raw) || out[j].Int != want[j].Int || math.Float64bits(out[j].Float) != math.Float64bits(want[j].Float) {
						t.Fatalf("piece %s record %d field %d: %+v, want %+v", pc.part, i, j, out[j], want[j])
					}
				}
			}
		}
	}
}
