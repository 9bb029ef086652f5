// Package tableplant is test tooling only: an Iceberg table metadata
// document that claims a table but that eosink can't read, as the
// parked-table tests (server, api) plant it in a destination to make a
// table commit fail for good.
package tableplant

import (
	"encoding/json"
	"testing"
)

// Claiming returns a copy of the table metadata document meta claiming a
// format version eosink can't read (3). It keeps the table's uuid, so a
// commit can't pass over it: table.ErrCorrupt, which parks the stream.
func Claiming(t testing.TB, meta []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(meta, &m); err != nil {
		t.Fatal(err)
	}
	m["format-version"] = json.RawMessage("3")
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
