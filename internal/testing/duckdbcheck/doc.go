// Package duckdbcheck is test tooling only: DuckDB, an independent reader,
// reads files written by eosink's encoders (staging.Encode) in the
// destination layout (layout partition templates) and must agree with what
// was written: counts, sums, partition values. Its own tests read files
// the encoders write in-process; tests/ reads what the built binary
// committed, with the same orders (OrdersConfig, MakeOrders) and the same
// DuckDB setup (Open).
//
// The DuckDB driver (github.com/duckdb/duckdb-go/v2) needs cgo and is
// imported only by this package's cgo-tagged files (Open and the tests),
// and only tests import this package: no non-test code depends on it, so
// CGO_ENABLED=0 go build ./cmd/eosink keeps working.
package duckdbcheck
