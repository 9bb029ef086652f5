package enginetest

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// recorder is a testing.TB whose cleanups and failures the test runs and
// reads itself.
type recorder struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.TB.Helper()
	r.TB.Fatalf(format, args...)
}

func (r *recorder) end() {
	for _, f := range slices.Backward(r.cleanups) {
		f()
	}
}

// TestRigChecksAtCleanup: the rig's cleanup passes a destination that
// holds its promises and fails the test on each seeded violation.
func TestRigChecksAtCleanup(t *testing.T) {
	id := invariant.BatchID{Stream: "clicks", Seq: 7}
	for _, tc := range []struct {
		name  string
		after func(r *Rig, res server.CheckpointResult) // after the batch is committed
		want  string                                    // "": no failure
	}{
		{"clean", func(*Rig, server.CheckpointResult) {}, ""},
		{"restart", func(r *Rig, res server.CheckpointResult) { r.Restart() }, ""},
		{"batch lost", func(r *Rig, res server.CheckpointResult) { r.Must(invariant.BatchID{Stream: "clicks", Seq: 8}) }, "clicks/8 appears 0 times"},
		{"temp file", func(r *Rig, res server.CheckpointResult) {
			if err := afero.WriteFile(r.Base, path.Join(Dest, "clicks", "x.inprogress"), []byte("{}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "I1: temp file in destination"},
		{"file rewritten", func(r *Rig, res server.CheckpointResult) {
			r.Check()
			for _, f := range res.Files {
				if err := afero.WriteFile(r.Base, path.Join(Dest, f.Final), invariant.Batch(id, 2), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, "I7: committed file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			r := New(rec, Options{Records: true})
			if _, err := r.Engine().Write(server.Write{Stream: id.Stream, Ext: "ndjson", Data: invariant.Batch(id, 3), Records: 3}); err != nil {
				t.Fatal(err)
			}
			res := r.Checkpoint()
			r.Must(id)
			tc.after(r, res)
			rec.end()
			got := strings.Join(rec.errs, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("cleanup reported %q, want %q", got, tc.want)
			}
		})
	}
}
