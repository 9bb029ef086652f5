// Package duckdbcheck holds tests only: DuckDB, an independent reader,
// reads files written by eosink's encoders (staging.Encode) in the
// destination layout (layout partition templates) and must agree with what
// was written: counts, sums, partition values.
//
// The DuckDB driver (github.com/duckdb/duckdb-go/v2) needs cgo and is
// imported only by this package's _test.go files, which build only with
// cgo: no non-test code depends on it, so CGO_ENABLED=0 go build
// ./cmd/eosink keeps working.
package duckdbcheck
