package s3_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/committertest"
	s3 "github.com/eosink/eosink/committer/s3"
)

// BenchmarkCommitLatency measures, against the real MinIO, how long
// Prepare (the upload, before "prepared") and Commit (after it: complete
// the multipart upload, or copy and delete the staging object) take for a
// 10 MiB and a 200 MiB file in each mode. Commit latency is what a client
// waiting with ?wait=commit sees after the prepared record.
//
//	go test -run XXX -bench CommitLatency -benchtime 3x ./committer/s3/
func BenchmarkCommitLatency(b *testing.B) {
	srv := shared.Get(b)
	for _, mode := range []s3.Mode{s3.Multipart, s3.Copy} {
		for _, size := range []int{10 << 20, 200 << 20} {
			name := fmt.Sprintf("%s/%dMiB", map[s3.Mode]string{s3.Multipart: "multipart", s3.Copy: "copy"}[mode], size>>20)
			b.Run(name, func(b *testing.B) {
				data := committertest.Content(7, size)
				var prep, commit time.Duration
				for i := range b.N {
					r := newRig(b, srv, mode, 0)
					e := r.env()
					final := fmt.Sprintf("bench/f-%d.ndjson", i)
					start := time.Now()
					f := committertest.Prepare(b, e, final, data)
					prep += time.Since(start)
					start = time.Now()
					if err := r.s3.Commit(b.Context(), f); err != nil {
						b.Fatal(err)
					}
					commit += time.Since(start)
				}
				b.SetBytes(int64(size))
				b.ReportMetric(float64(prep.Milliseconds())/float64(b.N), "prepare-ms")
				b.ReportMetric(float64(commit.Milliseconds())/float64(b.N), "commit-ms")
			})
		}
	}
}
