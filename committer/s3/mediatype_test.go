package s3

import "testing"

// An object is stored with the media type the API serves its file with
// (format.MediaType): a Parquet file was stored as
// application/octet-stream while the API served it as
// application/vnd.apache.parquet.
func TestPutOptionsMediaType(t *testing.T) {
	for name, want := range map[string]string{
		"s/part-n1-00000000000000000001-0000.parquet":   "application/vnd.apache.parquet",
		"s/part-n1-00000000000000000001-0000.ndjson":    "application/x-ndjson",
		"s/part-n1-00000000000000000001-0000.ndjson.gz": "application/gzip",
		"s/part-n1-00000000000000000001-0000.txt.zst":   "application/zstd",
		"s/part-n1-00000000000000000001-0000.txt":       "text/plain; charset=utf-8",
		"_manifests/n1/00000000000000000001.json":       "application/json",
		"s/other.bin": "application/octet-stream",
	} {
		if got := (&S3{}).putOptions(name, "00000000").ContentType; got != want {
			t.Errorf("%s: stored as %q, want %q", name, got, want)
		}
	}
}
