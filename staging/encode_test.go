package staging

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/orders"
	"github.com/parquet-go/parquet-go"
	"github.com/spf13/afero"
)

// stage writes records through a Txn in batches and pre-commits it
// (preCommitAll).
func stage(t testing.TB, fs afero.Fs, name string, recs [][]byte) Summary {
	t.Helper()
	if err := durable.MkdirAll(fs, "/s"); err != nil {
		t.Fatal(err)
	}
	tx, err := Create(fs, TempName("/s", name), 0)
	if err != nil {
		t.Fatal(err)
	}
	return preCommitAll(t, tx, recs)
}

// canonical returns a record as Parquet gives it back: schema fields only,
// nulls dropped, times in UTC RFC 3339, numbers as float64/int64.
func canonical(t testing.TB, rec []byte) string {
	t.Helper()
	vals, err := orders.Schema.NewChecker(true).Fields(rec)
	if err != nil {
		t.Fatalf("record %s: %v", rec, err)
	}
	m := map[string]any{}
	for i, f := range orders.Schema.Fields {
		if vals[i].Raw == nil {
			continue
		}
		switch f.Type {
		case streamconf.TypeTimestamp:
			tm, err := streamconf.ParseTimestamp(vals[i].Raw)
			if err != nil {
				t.Fatal(err)
			}
			m[f.Name] = tm.Truncate(time.Microsecond).Format(time.RFC3339Nano)
		case streamconf.TypeJSON:
			var compact bytes.Buffer
			if err := json.Compact(&compact, vals[i].Raw); err != nil {
				t.Fatal(err)
			}
			m[f.Name] = compact.String()
		default:
			var v any
			if err := json.Unmarshal(vals[i].Raw, &v); err != nil {
				t.Fatal(err)
			}
			m[f.Name] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEncodeRoundTrip(t *testing.T) {
	recs := orders.Records(t, 1, 1000)
	tests := []struct {
		name string // final name: its extension chooses the reader
		enc  Encoding
	}{
		{"a.ndjson", Encoding{Format: "ndjson", Compression: "none"}},
		{"a.ndjson.gz", Encoding{Format: "ndjson", Compression: "gzip"}},
		{"a.ndjson.zst", Encoding{Format: "ndjson", Compression: "zstd"}},
		{"a.txt.gz", Encoding{Format: "text", Compression: "gzip"}},
		{"a.txt.zst", Encoding{Compression: "zstd"}},
		{"zstd.parquet", Encoding{Format: "parquet", Schema: orders.Schema}},
		{"snappy.parquet", Encoding{Format: "parquet", Compression: "snappy", Schema: orders.Schema}},
		{"gzip.parquet", Encoding{Format: "parquet", Compression: "gzip", Schema: orders.Schema}},
		{"none-groups.parquet", Encoding{Format: "parquet", Compression: "none", Schema: orders.Schema, RowGroupBytes: 10 << 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := faultfs.NewCrashFS()
			src := stage(t, fs, tt.name, recs)
			dst := EncodedName(src.Temp)
			got, err := Encode(fs, src, dst, tt.enc)
			if err != nil {
				t.Fatal(err)
			}
			if err := durable.SyncDir(fs, "/s"); err != nil {
				t.Fatal(err)
			}
			// What a power cut leaves is the whole encoded file: Encode synced it.
			data, err := afero.ReadFile(fs.CrashClone(), dst)
			if err != nil {
				t.Fatal(err)
			}
			if got.Temp != dst || got.Bytes != int64(len(data)) || got.CRC32C != CRC32C(data) || got.Records != int64(len(recs)) {
				t.Fatalf("summary %+v; file has %d bytes, CRC-32C %s", got, len(data), CRC32C(data))
			}
			if r := got.Producers["p"]; len(r) != 1 || r[0] != [2]int64{0, 99} {
				t.Fatalf("producers %v", got.Producers)
			}
			if tt.enc.Plain() && got.CRC32C != src.CRC32C {
				t.Fatalf("plain copy changed the bytes")
			}
			r := bytes.NewReader(data)
			n, err := format.Count(r, int64(len(data)), tt.name)
			if err != nil || n != int64(len(recs)) {
				t.Fatalf("Count = %d, %v", n, err)
			}
			all, err := format.Preview(r, int64(len(data)), tt.name, len(recs)+1, 0)
			if err != nil || len(all) != len(recs) {
				t.Fatalf("Preview: %d records, %v", len(all), err)
			}
			for i := range recs {
				want, have := string(recs[i]), string(all[i])
				if tt.enc.Format == "parquet" {
					want, have = canonical(t, recs[i]), canonical(t, all[i])
				}
				if want != have {
					t.Fatalf("record %d: got %s, want %s", i, have, want)
				}
			}
			if tt.enc.Format == "parquet" {
				f, err := parquet.OpenFile(r, int64(len(data)))
				if err != nil {
					t.Fatal(err)
				}
				groups := len(f.RowGroups())
				if wantMany := tt.enc.RowGroupBytes > 0; (groups > 1) != wantMany {
					t.Fatalf("%d row groups", groups)
				}
				var cols []string
				for _, c := range f.Schema().Fields() {
					cols = append(cols, c.Name())
				}
				if strings.Join(cols, ",") != "id,region,amount,paid,ts,meta" {
					t.Fatalf("columns %v, want the schema's order", cols)
				}
			}
			short, err := format.Preview(r, int64(len(data)), tt.name, 2, 5)
			if err != nil || len(short) != 2 || len(short[0]) != 5 {
				t.Fatalf("Preview(2, 5 bytes) = %q, %v", short, err)
			}
		})
	}
}

func TestEncodeEmptyFile(t *testing.T) {
	for _, tt := range []struct {
		name string
		enc  Encoding
	}{
		{"e.ndjson.gz", Encoding{Compression: "gzip"}},
		{"e.ndjson.zst", Encoding{Compression: "zstd"}},
		{"e.parquet", Encoding{Format: "parquet", Schema: orders.Schema}},
	} {
		fs := afero.NewMemMapFs()
		src := stage(t, fs, tt.name, nil)
		got, err := Encode(fs, src, EncodedName(src.Temp), tt.enc)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		data, _ := afero.ReadFile(fs, got.Temp)
		if n, err := format.Count(bytes.NewReader(data), int64(len(data)), tt.name); err != nil || n != 0 || got.Records != 0 {
			t.Fatalf("%s: format.Count = %d, %v; summary %+v", tt.name, n, err, got)
		}
	}
}

// A temp file that no longer holds what its Summary says is not encoded.
func TestEncodeSourceChanged(t *testing.T) {
	recs := orders.Records(t, 2, 50)
	tests := []struct {
		name   string
		change func(Summary) Summary
	}{
		{"crc", func(s Summary) Summary { s.CRC32C = "00000000"; return s }},
		{"bytes", func(s Summary) Summary { s.Bytes--; return s }},
		{"records", func(s Summary) Summary { s.Records++; return s }},
	}
	for _, enc := range []Encoding{{Compression: "zstd"}, {Format: "parquet", Schema: orders.Schema}} {
		for _, tt := range tests {
			fs := afero.NewMemMapFs()
			src := tt.change(stage(t, fs, "c.ndjson", recs))
			dst := EncodedName(src.Temp)
			if _, err := Encode(fs, src, dst, enc); !errors.Is(err, ErrSourceChanged) {
				t.Fatalf("%s %+v: err = %v, want ErrSourceChanged", tt.name, enc, err)
			}
			if ok, _ := afero.Exists(fs, dst); ok {
				t.Fatalf("%s: encoded file left behind", tt.name)
			}
		}
	}
}

// Records the schema refuses never reach a Parquet file: Encode fails
// rather than drop a field.
func TestEncodeParquetRefusesMismatch(t *testing.T) {
	for _, rec := range []string{`{"id":1,"region":"x","ts":0,"extra":1}`, `{"id":"1","region":"x","ts":0}`, `[1]`} {
		fs := afero.NewMemMapFs()
		src := stage(t, fs, "m.parquet", [][]byte{[]byte(`{"id":0,"region":"x","ts":0}`), []byte(rec)})
		_, err := Encode(fs, src, EncodedName(src.Temp), Encoding{Format: "parquet", Schema: orders.Schema})
		if !errors.Is(err, streamconf.ErrSchemaMismatch) || !strings.Contains(err.Error(), "record 2") {
			t.Fatalf("%s: err = %v, want a schema mismatch of record 2", rec, err)
		}
	}
}

// Every failing file operation of Encode — open, write, sync, close, on a
// full disk or an I/O error — fails the encode; none is retried, and the
// error keeps its class (ENOSPC is ErrDiskFull, a failed fsync ErrSync).
func TestEncodeFaults(t *testing.T) {
	recs := orders.Records(t, 3, 300)
	for _, enc := range []Encoding{{Compression: "gzip"}, {Compression: "zstd"}, {Format: "parquet", Schema: orders.Schema, RowGroupBytes: 4 << 10}} {
		kinds := faultfs.Kinds(faultfs.OpOpen, faultfs.OpWrite, faultfs.OpSync, faultfs.OpClose, faultfs.OpRead)
		for n := int64(0); ; n++ {
			base := afero.NewMemMapFs()
			src := stage(t, base, "f.ndjson", recs)
			for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EIO} {
				inj := faultfs.FailNth(n, kinds, errno)
				fs := faultfs.NewInjectFS(base, inj)
				dst := EncodedName(src.Temp)
				_ = base.Remove(dst)
				got, err := Encode(fs, src, dst, enc)
				op, fired := inj.Fired()
				if !fired {
					if err != nil {
						t.Fatalf("%+v: no fault, err %v", enc, err)
					}
					if got.Records != int64(len(recs)) {
						t.Fatalf("%+v: summary %+v", enc, got)
					}
					if n < 5 {
						t.Fatalf("%+v: only %d operations", enc, n)
					}
					goto next
				}
				if err == nil {
					// A fault on a read-only close is harmless; any other is not.
					if op.Kind == faultfs.OpClose && op.Path == src.Temp {
						continue
					}
					t.Fatalf("%+v: fault %v not reported", enc, op)
				}
				if op.Kind == faultfs.OpSync && !errors.Is(err, durable.ErrSync) {
					t.Fatalf("%+v: fault %v: err %v is not ErrSync", enc, op, err)
				}
				if errno == syscall.ENOSPC && op.Kind == faultfs.OpWrite && !errors.Is(err, durable.ErrDiskFull) {
					t.Fatalf("%+v: fault %v: err %v is not ErrDiskFull", enc, op, err)
				}
				if ok, _ := afero.Exists(base, dst); ok && op.Kind != faultfs.OpClose {
					t.Fatalf("%+v: fault %v: encoded file left behind", enc, op)
				}
			}
		}
	next:
	}
}

func TestDecodeCorrupt(t *testing.T) {
	recs := orders.Records(t, 4, 200)
	encode := func(name string, enc Encoding) []byte {
		fs := afero.NewMemMapFs()
		src := stage(t, fs, name, recs)
		got, err := Encode(fs, src, EncodedName(src.Temp), enc)
		if err != nil {
			t.Fatal(err)
		}
		data, err := afero.ReadFile(fs, got.Temp)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	gz := encode("x.ndjson.gz", Encoding{Compression: "gzip"})
	zs := encode("x.ndjson.zst", Encoding{Compression: "zstd"})
	pq := encode("x.parquet", Encoding{Format: "parquet", Schema: orders.Schema})
	flip := func(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 0x40; return c }
	tests := []struct {
		name string
		data []byte
	}{
		{"x.ndjson", []byte("{}\n{}")},
		{"x.txt", []byte("no newline")},
		{"x.ndjson.gz", gz[:len(gz)-5]},
		{"x.ndjson.gz", flip(gz, len(gz)/2)},
		{"x.ndjson.gz", []byte("not gzip")},
		{"x.ndjson.zst", zs[:len(zs)-5]},
		{"x.ndjson.zst", flip(zs, len(zs)/2)},
		{"x.ndjson.zst", []byte("not zstd")},
		{"x.parquet", pq[:len(pq)-10]},
		{"x.parquet", pq[10:]},
		{"x.parquet", []byte("PAR1PAR1")},
	}
	for i, tt := range tests {
		_, err := format.Count(bytes.NewReader(tt.data), int64(len(tt.data)), tt.name)
		if !errors.Is(err, format.ErrCorrupt) {
			t.Errorf("case %d %s: err = %v, want format.ErrCorrupt", i, tt.name, err)
		}
	}
	// Concatenated gzip members and zstd frames are one valid file.
	for _, tt := range []struct {
		name string
		data []byte
	}{{"x.ndjson.gz", append(bytes.Clone(gz), gz...)}, {"x.ndjson.zst", append(bytes.Clone(zs), zs...)}} {
		n, err := format.Count(bytes.NewReader(tt.data), int64(len(tt.data)), tt.name)
		if err != nil || n != 2*int64(len(recs)) {
			t.Errorf("%s twice: format.Count = %d, %v", tt.name, n, err)
		}
	}
	if _, err := format.Count(bytes.NewReader(nil), 0, "x.csv"); !errors.Is(err, format.ErrUnsupported) {
		t.Errorf("unknown extension: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("{}\n"), uint8(0))
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"), uint8(1))
	f.Add([]byte("\x28\xb5\x2f\xfd\x00\x58\x00\x00"), uint8(2))
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"), uint8(3))
	names := []string{"f.ndjson", "f.ndjson.gz", "f.txt.zst", "f.parquet"}
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		name := names[int(kind)%len(names)]
		recs, err := format.OpenRecords(bytes.NewReader(data), int64(len(data)), name)
		if err != nil {
			if !errors.Is(err, format.ErrCorrupt) && !errors.Is(err, format.ErrUnsupported) {
				t.Fatalf("%s: open error %v has no class", name, err)
			}
			return
		}
		defer recs.Close()
		for range 10000 {
			_, err := recs.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				if !errors.Is(err, format.ErrCorrupt) {
					t.Fatalf("%s: error %v is not format.ErrCorrupt", name, err)
				}
				return
			}
		}
	})
}

// A corrupt Parquet file claiming a huge footer is refused without
// allocating what it claims (parquet-go would allocate it first).
func TestParquetHugeFooterClaim(t *testing.T) {
	data := []byte("PAR1\xff\xff\xff\x7fPAR1")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := format.Count(bytes.NewReader(data), int64(len(data)), "x.parquet")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, format.ErrCorrupt) {
		t.Fatalf("err = %v, want format.ErrCorrupt", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a 12-byte file", grew)
	}
}
