//go:build cgo

package duckdbcheck

import (
	"database/sql"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"
)

// Open opens an in-memory DuckDB for the test, closed at its end, with one
// connection (so that a SET applies to every query) and its time zone UTC.
func Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(t.Context(), "SET TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	return db
}
