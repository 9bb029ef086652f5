package staging

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/spf13/afero"
)

// eofAtEnd is an io.ReaderAt that answers a read reaching the end of its
// data with io.EOF even when it filled the buffer, as the io.ReaderAt
// contract allows and S3 objects (minio-go's Object) do.
type eofAtEnd struct{ r *bytes.Reader }

func (e eofAtEnd) ReadAt(p []byte, off int64) (int, error) {
	n, err := e.r.ReadAt(p, off)
	if err == nil && off+int64(n) == e.r.Size() {
		err = io.EOF
	}
	return n, err
}

// TestCheckRecordsEOFAtEnd: a Parquet file read through a ReaderAt that
// says io.EOF with the last bytes decodes. Fails before: the footer read
// took that io.EOF for an error, and `eosink verify` reported every
// Parquet file of an S3 destination ("read Parquet footer: EOF").
func TestCheckRecordsEOFAtEnd(t *testing.T) {
	fs := afero.NewMemMapFs()
	schema := &streamconf.Schema{Fields: []streamconf.Field{{Name: "a", Type: streamconf.TypeInt64, Required: true}}}
	for _, c := range []struct {
		name string
		enc  Encoding
	}{
		{"f.parquet", Encoding{Format: streamconf.FormatParquet, Schema: schema}},
		{"f.ndjson.zst", Encoding{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd}},
		{"f.ndjson.gz", Encoding{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip}},
	} {
		tx, err := Create(fs, "/"+c.name+Suffix, 0)
		if err != nil {
			t.Fatal(err)
		}
		recs := strings.Repeat(`{"a":7}`+"\n", 40)
		if err := tx.Append([]byte(recs), 40, "", 0); err != nil {
			t.Fatal(err)
		}
		sum, err := tx.PreCommit()
		if err != nil {
			t.Fatal(err)
		}
		enc, err := Encode(fs, sum, EncodedName(sum.Temp), c.enc)
		if err != nil {
			t.Fatal(err)
		}
		data, err := afero.ReadFile(fs, enc.Temp)
		if err != nil {
			t.Fatal(err)
		}
		if err := format.CheckRecords(eofAtEnd{bytes.NewReader(data)}, int64(len(data)), c.name, 40); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if err := format.CheckRecords(eofAtEnd{bytes.NewReader(data)}, int64(len(data)), c.name, 41); err == nil {
			t.Errorf("%s: a wrong count passed", c.name)
		}
	}
}
