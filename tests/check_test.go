package tests

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// destReader reads a destination directly: the directory on disk
// (invariant.LocalDest), or the bucket through minio-go
// (invariant.S3Dest). Never through eosink.
type destReader = invariant.Dest

// dataFileRE is a data file's path under the default partition template
// (or the table stream's, p=<producer>): stream, dt=, hour=,
// part-<node>-<checkpoint>-<index>.ndjson.
var dataFileRE = regexp.MustCompile(`^([a-z0-9][a-z0-9_.-]*)/(?:dt=\d{4}-\d{2}-\d{2}/hour=\d{2}|p=[A-Za-z0-9_.-]+)/part-([A-Za-z0-9_.-]+)-(\d{20})-(\d{4})\.(ndjson|ndjson\.gz|ndjson\.zst|parquet)$`)

// checkDest reads the whole destination and checks it with the invariant
// checker against want, the batches that must each be there exactly once;
// with exact, nothing else may be, nor an empty file. Writes without producer headers (their
// producer starts with anonSender) carry no ranges in the manifests.
func checkDest(t testing.TB, d destReader, want map[batchKey]int, exact bool) *invariant.Report {
	must := make(map[invariant.BatchID]bool, len(want))
	for k := range want {
		must[invariant.BatchID{Producer: k.P, Stream: k.S, Seq: k.Q}] = true
	}
	c := &invariant.Checker{
		Source:    d,
		Anonymous: func(p string) bool { return strings.HasPrefix(p, anonSender) },
		Paths:     dataFileRE,
		NoEmpty:   true,
	}
	return c.CheckContext(t.Context(), invariant.Expect{Must: must, Exact: exact})
}

// requireDest runs checkDest and fails the test on any problem.
func requireDest(t testing.TB, d destReader, want map[batchKey]int, exact bool) *invariant.Report {
	t.Helper()
	r := checkDest(t, d, want, exact)
	for i, p := range r.Problems {
		if i == 40 {
			t.Errorf("... and %d more problems", len(r.Problems)-40)
			break
		}
		t.Errorf("%s: %s", d, p)
	}
	return r
}

func firstN(l []string, n int) string {
	if len(l) <= n {
		return strings.Join(l, ", ")
	}
	return strings.Join(l[:n], ", ") + fmt.Sprintf(", ... (%d more)", len(l)-n)
}

// defaultPartition is the partition path the end-to-end tests' streams
// get: the default template, dt=YYYY-MM-DD/hour=HH.
var defaultPartition = regexp.MustCompile(`^dt=[0-9]{4}-[0-9]{2}-[0-9]{2}/hour=[0-9]{2}$`)

// dataFile parses the destination path of a data file the end-to-end
// tests write: <stream>/<default partition>/<part name>.ndjson, the part
// name read by layout.ParsePartName.
func dataFile(p string) (stream, node string, ckpt uint64, ok bool) {
	dir, base := path.Split(p)
	node, ckpt, _, ext, ok := layout.ParsePartName(base)
	stream, partition, _ := strings.Cut(strings.TrimSuffix(dir, "/"), "/")
	if !ok || ext != "ndjson" || !layout.Stream(stream) || !defaultPartition.MatchString(partition) {
		return "", "", 0, false
	}
	return stream, node, ckpt, true
}

// isDataFile reports whether p is a data file's path (dataFile).
func isDataFile(p string) bool {
	_, _, _, ok := dataFile(p)
	return ok
}
