// Package stagetest is test tooling only: a staged file encoded the way a
// checkpoint encodes it, for the readers of encoded files (the catalog's
// verify, the UI's preview) to read.
package stagetest

import (
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// Encode stages recs (one line each) as one transaction at temp, pre-commits
// it and encodes it as enc next to it (staging.EncodedName); it returns the
// encoded file's summary. Any failure ends the test.
func Encode(t testing.TB, fs afero.Fs, temp string, recs []string, enc format.Encoding) staging.Summary {
	t.Helper()
	tx, err := staging.Create(fs, temp, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Append([]byte(strings.Join(recs, "\n")+"\n"), len(recs), "", 0); err != nil {
		t.Fatal(err)
	}
	sum, err := tx.PreCommit()
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := staging.Encode(fs, sum, staging.EncodedName(sum.Temp), enc)
	if err != nil {
		t.Fatal(err)
	}
	return encoded
}
