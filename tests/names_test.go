package tests

import (
	"path"
	"regexp"
	"strings"

	"github.com/eosink/eosink/internal/layout"
)

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
