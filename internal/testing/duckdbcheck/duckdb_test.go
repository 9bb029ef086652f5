//go:build cgo

package duckdbcheck

import (
	"database/sql"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// dest is a destination directory (files) and a staging directory on the
// OS file system, in a temp dir.
type dest struct {
	fs      afero.Fs
	dirs    *durable.Dirs
	staging string
	files   string
}

func newDest(t *testing.T) *dest {
	t.Helper()
	root := t.TempDir()
	d := &dest{fs: afero.NewOsFs(), dirs: &durable.Dirs{}, staging: filepath.Join(root, "staging"), files: filepath.Join(root, "files")}
	if err := durable.MkdirAll(d.fs, d.staging); err != nil {
		t.Fatal(err)
	}
	return d
}

// writeFile stages records as one transaction, encoding them as they
// arrive as the engine does (staging.CreateEncoded, here in inline steps
// of 4 KiB: many zstd frames or gzip members per file), and moves it to
// final (with the durable recipe), as a checkpoint would.
func (d *dest) writeFile(t *testing.T, final string, recs [][]byte, enc format.Encoding) staging.Summary {
	t.Helper()
	fs, dirs := d.fs, d.dirs
	tx, err := staging.CreateEncoded(fs, staging.TempName(d.staging, filepath.Base(final)), 1<<10, enc, staging.NewInlineEncoders(4<<10))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(recs); i += 20 {
		var batch []byte
		j := min(i+20, len(recs))
		for _, r := range recs[i:j] {
			batch = append(append(batch, r...), '\n')
		}
		if err := tx.Append(batch, j-i, "", int64(i/20)); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := tx.PreCommit()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Plain != "" {
		if err := staging.Remove(fs, sum.Plain); err != nil {
			t.Fatal(err)
		}
	}
	if err := durable.Rename(fs, dirs, sum.Temp, final); err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestDuckDBReadsHivePartitionedParquet(t *testing.T) {
	conf, err := streamconf.Decode([]byte(OrdersConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := conf.Validate(); err != nil {
		t.Fatal(err)
	}
	conf = conf.Defaults()
	tmpl, err := conf.Template()
	if err != nil {
		t.Fatal(err)
	}
	orders := MakeOrders(t, uint64(time.Now().UnixNano()), 3000)

	// Place each record by the template; a checkpoint writes one file per partition.
	check := conf.Schema.NewChecker(true)
	ingest := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	byPart := map[string][][]byte{}
	for i, o := range orders {
		rec := o.JSON(i%2 == 1)
		if err := check.Check(rec); err != nil {
			t.Fatalf("record %s: %v", rec, err)
		}
		p, err := tmpl.Eval(ingest, rec)
		if err != nil {
			t.Fatal(err)
		}
		byPart[p] = append(byPart[p], rec)
	}
	d := newDest(t)
	enc := format.EncodingFor(conf)
	enc.RowGroupBytes = 8 << 10 // several row groups per file
	ext, err := conf.Ext("ndjson")
	if err != nil {
		t.Fatal(err)
	}
	parts := slices.Sorted(maps.Keys(byPart))
	for i, p := range parts {
		final := filepath.Join(d.files, "orders", p, fmt.Sprintf("part-n1-%020d-%04d.%s", 7, i, ext))
		sum := d.writeFile(t, final, byPart[p], enc)
		if sum.Records != int64(len(byPart[p])) {
			t.Fatalf("%s: %d records, want %d", final, sum.Records, len(byPart[p]))
		}
	}
	if len(parts) < 6 {
		t.Fatalf("only %d partitions", len(parts))
	}

	var wantIDs int64
	var wantAmount float64
	var wantAmounts int64
	for _, o := range orders {
		wantIDs += o.ID
		if !math.IsNaN(o.Amount) {
			wantAmount += o.Amount
			wantAmounts++
		}
	}
	db := Open(t)
	glob := filepath.Join(d.files, "orders", "**", "*.parquet")
	src := fmt.Sprintf("read_parquet('%s', hive_partitioning = true, hive_types = {'dt': VARCHAR, 'region': VARCHAR})", glob)

	var n, ids, amounts int64
	var amount float64
	q := "SELECT count(*), sum(id), sum(amount), count(amount) FROM " + src
	if err := db.QueryRowContext(t.Context(), q).Scan(&n, &ids, &amount, &amounts); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if n != int64(len(orders)) || ids != wantIDs || amounts != wantAmounts || math.Abs(amount-wantAmount) > 1e-6 {
		t.Fatalf("DuckDB: %d rows, sum(id) %d, sum(amount) %f over %d; want %d, %d, %f over %d",
			n, ids, amount, amounts, len(orders), wantIDs, wantAmount, wantAmounts)
	}

	// Event-time partitions: every row's dt is its own ts's UTC date, and
	// its region directory, percent-decoded, is its region (DuckDB decodes
	// hive values the same way: "ap%20south" reads as "ap south").
	var badDT, badRegion int64
	q = "SELECT count(*) FILTER (WHERE dt <> strftime(ts, '%Y-%m-%d')), " +
		"count(*) FILTER (WHERE region <> url_decode(regexp_extract(filename, 'region=([^/]*)/', 1))) FROM " + src
	if err := db.QueryRowContext(t.Context(), q).Scan(&badDT, &badRegion); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if badDT != 0 || badRegion != 0 {
		t.Fatalf("%d rows with dt not their ts's date, %d with the wrong region directory", badDT, badRegion)
	}

	// Row by row: DuckDB's values are the records' values.
	rows, err := db.QueryContext(t.Context(), "SELECT id, ts, amount, region FROM "+src+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var id int64
		var ts time.Time
		var amt sql.NullFloat64
		var region string
		if err := rows.Scan(&id, &ts, &amt, &region); err != nil {
			t.Fatal(err)
		}
		o := orders[i]
		if id != o.ID || !ts.Equal(o.TS) || amt.Valid == math.IsNaN(o.Amount) || amt.Valid && amt.Float64 != o.Amount || region != o.Region {
			t.Fatalf("row %d: id %d ts %v amount %v region %q; want %+v", i, id, ts, amt, region, o)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(orders) {
		t.Fatalf("%d rows", i)
	}
}

func TestDuckDBReadsCompressedNDJSON(t *testing.T) {
	orders := MakeOrders(t, uint64(time.Now().UnixNano()), 2000)
	recs := make([][]byte, len(orders))
	var wantIDs int64
	for i, o := range orders {
		recs[i] = o.JSON(false)
		wantIDs += o.ID
	}
	d := newDest(t)
	db := Open(t)
	for _, comp := range []string{"none", "gzip", "zstd"} {
		conf := streamconf.Config{Format: "ndjson", Compression: comp}.Defaults()
		ext, err := conf.Ext("ndjson")
		if err != nil {
			t.Fatal(err)
		}
		final := filepath.Join(d.files, "clicks", "dt=2026-11-29", "hour=09", "part-n1-00000000000000000003-0000."+ext)
		d.writeFile(t, final, recs, format.EncodingFor(conf))
		if _, err := os.Stat(final); err != nil {
			t.Fatal(err)
		}
		var n, ids int64
		var minTS time.Time
		q := fmt.Sprintf("SELECT count(*), sum(id), min(ts::TIMESTAMPTZ) FROM read_json_auto('%s')", final)
		if err := db.QueryRowContext(t.Context(), q).Scan(&n, &ids, &minTS); err != nil {
			t.Fatalf("%s: %s: %v", comp, q, err)
		}
		wantMin := orders[0].TS
		for _, o := range orders {
			if o.TS.Before(wantMin) {
				wantMin = o.TS
			}
		}
		if n != int64(len(orders)) || ids != wantIDs || !minTS.Equal(wantMin) {
			t.Fatalf("%s: DuckDB read %d rows, sum(id) %d, min(ts) %v; want %d, %d, %v", ext, n, ids, minTS, len(orders), wantIDs, wantMin)
		}
		if !strings.HasSuffix(final, map[string]string{"none": ".ndjson", "gzip": ".ndjson.gz", "zstd": ".ndjson.zst"}[comp]) {
			t.Fatalf("extension %s for %s", ext, comp)
		}
	}
}
