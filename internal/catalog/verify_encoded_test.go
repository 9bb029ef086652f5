package catalog

import (
	"context"
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/stagetest"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// TestVerifyEncodedFiles: verify decodes compressed and Parquet files and
// counts their records. Fails before: it counted '\n' bytes of the stored
// bytes, so every correct zstd or Parquet file was reported.
func TestVerifyEncodedFiles(t *testing.T) {
	const dest, stg = "/dest", "/staging"
	schema := &streamconf.Schema{Fields: []streamconf.Field{{Name: "a", Type: streamconf.TypeInt64, Required: true}}}
	cases := []struct {
		ext string
		enc format.Encoding
	}{
		{"ndjson.zst", format.Encoding{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd}},
		{"ndjson.gz", format.Encoding{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip}},
		{"parquet", format.Encoding{Format: streamconf.FormatParquet, Schema: schema}},
	}
	for _, c := range cases {
		t.Run(c.ext, func(t *testing.T) {
			for _, lie := range []int64{0, 1} { // the manifest's record count is right, then one too many
				fs := afero.NewMemMapFs()
				_ = fs.MkdirAll(stg, 0o755)
				var recs []string
				for i := range 50 {
					recs = append(recs, `{"a":`+strings.Repeat("1", 1+i%5)+`}`)
				}
				enc := stagetest.Encode(t, fs, path.Join(stg, "t"+staging.Suffix), recs, c.enc)
				final := "s/x=1/" + layout.PartName("n1", 1, 0, c.ext)
				_ = fs.MkdirAll(path.Join(dest, "s/x=1"), 0o755)
				if err := fs.Rename(enc.Temp, path.Join(dest, final)); err != nil {
					t.Fatal(err)
				}
				ck := &recovery.Checkpoint{ID: 1, Files: []committer.File{{Stream: "s", Final: final, Bytes: enc.Bytes, Records: enc.Records + lie, CRC32C: enc.CRC32C}}}
				body, err := recovery.BuildManifest("n1", ck)
				if err != nil {
					t.Fatal(err)
				}
				_ = fs.MkdirAll(path.Join(dest, "_manifests/n1"), 0o755)
				if err := afero.WriteFile(fs, path.Join(dest, layout.ManifestName("n1", 1)), body, 0o644); err != nil {
					t.Fatal(err)
				}
				cat, err := New(Config{Files: local.New(fs, dest, stg)})
				if err != nil {
					t.Fatal(err)
				}
				rep, err := cat.Verify(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				js, _ := json.Marshal(rep.Problems)
				switch {
				case lie == 0 && (len(rep.Problems) != 0 || rep.Records != 50):
					t.Fatalf("a correct %s file: %d records, problems %s", c.ext, rep.Records, js)
				case lie == 1 && (len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].What, "decodes to 50 records, manifest says 51")):
					t.Fatalf("a manifest claiming 51 records: problems %s", js)
				}
			}
		})
	}
}
