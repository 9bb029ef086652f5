package staging

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/heap"
	"github.com/eosink/eosink/internal/testing/orders"
	"github.com/parquet-go/parquet-go"
	"github.com/spf13/afero"
)

var streamEncodings = []struct {
	name string // final name: its extension chooses the reader
	enc  Encoding
}{
	{"a.ndjson.gz", Encoding{Format: "ndjson", Compression: "gzip"}},
	{"a.ndjson.zst", Encoding{Format: "ndjson", Compression: "zstd"}},
	{"a.txt.zst", Encoding{Compression: "zstd"}},
	{"zstd.parquet", Encoding{Format: "parquet", Schema: orders.Schema}},
	{"groups.parquet", Encoding{Format: "parquet", Compression: "snappy", Schema: orders.Schema, RowGroupBytes: 20 << 10}},
}

// appendAll appends recs in batches of 10 as producer "p", returning the
// records of the batches accepted.
func appendAll(tx *Txn, recs [][]byte) (accepted [][]byte, err error) {
	for i := 0; i < len(recs); i += 10 {
		var batch []byte
		j := min(i+10, len(recs))
		for _, r := range recs[i:j] {
			batch = append(append(batch, r...), '\n')
		}
		if e := tx.Append(batch, j-i, "p", int64(i/10)); e != nil {
			err = errors.Join(err, e)
			continue
		}
		accepted = append(accepted, recs[i:j]...)
	}
	return accepted, err
}

// preCommitAll appends recs (appendAll) and pre-commits tx; any failure
// ends the test.
func preCommitAll(t testing.TB, tx *Txn, recs [][]byte) Summary {
	t.Helper()
	if _, err := appendAll(tx, recs); err != nil {
		t.Fatal(err)
	}
	sum, err := tx.PreCommit()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// checkEncoded reads the encoded file sum names back from what a power
// cut would leave and compares it with recs.
func checkEncoded(t *testing.T, fs *faultfs.CrashFS, name string, enc Encoding, sum Summary, recs [][]byte) {
	t.Helper()
	if err := durable.SyncDir(fs, "/s"); err != nil { // the caller's step
		t.Fatal(err)
	}
	data, err := afero.ReadFile(fs.CrashClone(), sum.Temp)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Bytes != int64(len(data)) || sum.CRC32C != CRC32C(data) || sum.Records != int64(len(recs)) {
		t.Fatalf("summary %+v; file has %d bytes, CRC-32C %s, want %d records", sum, len(data), CRC32C(data), len(recs))
	}
	r := bytes.NewReader(data)
	all, err := format.Preview(r, int64(len(data)), name, len(recs)+1, 0)
	if err != nil || len(all) != len(recs) {
		t.Fatalf("Preview: %d records, %v; want %d", len(all), err, len(recs))
	}
	for i := range recs {
		want, have := string(recs[i]), string(all[i])
		if enc.Format == "parquet" {
			want, have = canonical(t, recs[i]), canonical(t, all[i])
		}
		if want != have {
			t.Fatalf("record %d: got %s, want %s", i, have, want)
		}
	}
}

// Encoding as batches arrive gives the file the whole-file Encode gives,
// record for record, in background steps or inline ones, and pre-commit
// syncs it: a power cut after PreCommit leaves it whole.
func TestCreateEncodedRoundTrip(t *testing.T) {
	recs := orders.Records(t, 11, 3000)
	for _, tt := range streamEncodings {
		for _, mode := range []string{"background", "inline"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				fs := faultfs.NewCrashFS()
				if err := durable.MkdirAll(fs, "/s"); err != nil {
					t.Fatal(err)
				}
				es := NewEncoders(2, 8<<10)
				if mode == "inline" {
					es = NewInlineEncoders(8 << 10)
				}
				tx, err := CreateEncoded(fs, TempName("/s", tt.name), 1<<10, tt.enc, es)
				if err != nil {
					t.Fatal(err)
				}
				sum := preCommitAll(t, tx, recs)
				if sum.Temp != EncodedName(TempName("/s", tt.name)) || sum.Plain != TempName("/s", tt.name) {
					t.Fatalf("summary names %q from %q", sum.Temp, sum.Plain)
				}
				if r := sum.Producers["p"]; len(r) != 1 || r[0] != [2]int64{0, 299} {
					t.Fatalf("producers %v", sum.Producers)
				}
				checkEncoded(t, fs, tt.name, tt.enc, sum, recs)
				if tt.enc.RowGroupBytes > 0 {
					data, _ := afero.ReadFile(fs, sum.Temp)
					f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
					if err != nil {
						t.Fatal(err)
					}
					if n := len(f.RowGroups()); n < 10 {
						t.Fatalf("%d row groups", n)
					}
				}
				if err := tx.Abort(); err != nil { // after a later failure of the checkpoint
					t.Fatal(err)
				}
				if names, _ := List(fs, "/s"); len(names) != 0 {
					t.Fatalf("left %v", names)
				}
			})
		}
	}
}

// Size counts the encoded bytes, so roll_size holds the final file.
func TestCreateEncodedSize(t *testing.T) {
	fs := afero.NewMemMapFs()
	tx, err := CreateEncoded(fs, "/f.ndjson.zst.inprogress", 1<<10, Encoding{Compression: "zstd"}, NewInlineEncoders(4<<10))
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("x"), 99)
	var raw int64
	for i := range 2000 {
		if err := tx.Append(append(line, '\n'), 1, "", int64(i)); err != nil {
			t.Fatal(err)
		}
		raw += 100
	}
	if got := tx.Size(); got > raw/10 {
		t.Fatalf("Size %d for %d bytes of repetitive records", got, raw)
	}
	sum, err := tx.PreCommit()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Bytes > raw/10 {
		t.Fatalf("%d bytes", sum.Bytes)
	}
}

// Every filesystem operation of appends, steps and pre-commit fails in
// turn (inline steps: the same order each run). A batch whose own write
// failed is refused and not in the file; anything else either pre-commits
// a file holding exactly the accepted batches, or fails, and the abort
// then leaves no file.
func TestCreateEncodedFaults(t *testing.T) {
	recs := orders.Records(t, 12, 400)
	kinds := faultfs.Kinds(faultfs.OpOpen, faultfs.OpWrite, faultfs.OpSync, faultfs.OpClose, faultfs.OpRead, faultfs.OpTruncate)
	for _, tt := range streamEncodings {
		t.Run(tt.name, func(t *testing.T) {
			swept := 0
			for n := int64(0); ; n++ {
				errno := []syscall.Errno{syscall.ENOSPC, syscall.EIO}[n%2]
				base := faultfs.NewCrashFS()
				if err := durable.MkdirAll(base, "/s"); err != nil {
					t.Fatal(err)
				}
				inj := faultfs.FailNth(n, kinds, errno)
				fs := faultfs.NewInjectFS(base, inj)
				name := TempName("/s", tt.name)
				tx, err := CreateEncoded(fs, name, 1<<10, tt.enc, NewInlineEncoders(2<<10))
				if err != nil {
					continue // the create failed: nothing to check
				}
				accepted, _ := appendAll(tx, recs)
				sum, err := tx.PreCommit()
				op, fired := inj.Fired()
				if !fired {
					if err != nil || len(accepted) != len(recs) {
						t.Fatalf("no fault: %d accepted, %v", len(accepted), err)
					}
					checkEncoded(t, base, tt.name, tt.enc, sum, recs)
					if swept < 20 {
						t.Fatalf("only %d fault points", swept)
					}
					return
				}
				swept++
				if err == nil {
					checkEncoded(t, base, tt.name, tt.enc, sum, accepted)
					continue
				}
				if op.Kind == faultfs.OpSync && !errors.Is(err, durable.ErrSync) {
					t.Fatalf("fault %v: err %v is not ErrSync", op, err)
				}
				if errno == syscall.ENOSPC && op.Kind == faultfs.OpWrite && op.Path == EncodedName(name) && !errors.Is(err, durable.ErrDiskFull) {
					t.Fatalf("fault %v: err %v is not ErrDiskFull", op, err)
				}
				if err := tx.Abort(); err != nil {
					t.Fatalf("fault %v: abort: %v", op, err)
				}
				if names, _ := List(base, "/s"); len(names) != 0 {
					t.Fatalf("fault %v: left %v", op, names)
				}
			}
		})
	}
}

// An abort while steps run stops them and leaves no file; a release
// (a crash's view) stops them too.
func TestCreateEncodedAbortWhileEncoding(t *testing.T) {
	recs := orders.Records(t, 13, 20000)
	for _, release := range []bool{false, true} {
		t.Run(fmt.Sprint("release=", release), func(t *testing.T) {
			fs := afero.NewMemMapFs()
			tx, err := CreateEncoded(fs, "/p.parquet.inprogress", 4<<10, Encoding{Format: "parquet", Schema: orders.Schema}, NewEncoders(1, 16<<10))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := appendAll(tx, recs); err != nil {
				t.Fatal(err)
			}
			if release {
				tx.Release()
				return
			}
			if err := tx.Abort(); err != nil {
				t.Fatal(err)
			}
			if names, _ := List(fs, "/"); len(names) != 0 {
				t.Fatalf("left %v", names)
			}
		})
	}
}

// The memory an open Parquet transaction holds between steps is its row
// group being built (compressed pages and a page buffer per column), not
// its file's size: measured as live heap after full GCs, with 16 files
// open at once, each 6 MiB into an 8 MiB row group (the worst point: the
// most compressed pages held, none written yet).
func TestCreateEncodedMemoryPerOpenFile(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("memory means nothing under the race detector")
	}
	const files, perFile = 16, 6 << 20
	recs := orders.Records(t, 14, perFile/100)
	var batches [][]byte
	for i := 0; i < len(recs); i += 100 {
		var batch []byte
		for _, r := range recs[i:min(i+100, len(recs))] {
			batch = append(append(batch, r...), '\n')
		}
		batches = append(batches, batch)
	}
	recs = nil
	fs := afero.NewBasePathFs(afero.NewOsFs(), t.TempDir())
	es := NewInlineEncoders(0)
	enc := Encoding{Format: "parquet", Schema: orders.Schema}
	// One file first: the encoders' shared codec state is not per file.
	warm, err := CreateEncoded(fs, "/warm.parquet.inprogress", 0, enc, es)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range batches[:len(batches)/4] {
		if err := warm.Append(b, 100, "", int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	base := heap.Live()
	txns := make([]*Txn, files)
	for k := range txns {
		if txns[k], err = CreateEncoded(fs, fmt.Sprintf("/m%02d.parquet.inprogress", k), 0, enc, es); err != nil {
			t.Fatal(err)
		}
		for i, b := range batches {
			if err := txns[k].Append(b, 100, "", int64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	per := (heap.Live() - base) / files
	t.Logf("%d open Parquet files, %d MiB of records each: live heap +%.2f MiB per file", files, perFile>>20, float64(per)/(1<<20))
	if limit := int64(4 << 20); per > limit {
		t.Errorf("live heap +%d bytes per open Parquet file, want at most %d", per, limit)
	}
	for _, tx := range append(txns, warm) {
		if err := tx.Abort(); err != nil {
			t.Fatal(err)
		}
	}
}
