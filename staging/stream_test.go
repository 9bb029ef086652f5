package staging

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/heap"
	"github.com/eosink/eosink/internal/testing/orders"
	"github.com/parquet-go/parquet-go"
	"github.com/spf13/afero"
)

var streamEncodings = []struct {
	name    string // final name: its extension chooses the reader
	enc     Encoding
	checked bool // batches come with their checked values, as the write path sends a Parquet stream's
}{
	{"a.ndjson.gz", Encoding{Format: "ndjson", Compression: "gzip"}, false},
	{"a.ndjson.zst", Encoding{Format: "ndjson", Compression: "zstd"}, false},
	{"a.txt.zst", Encoding{Compression: "zstd"}, false},
	{"zstd.parquet", Encoding{Format: "parquet", Schema: orders.Schema}, false},
	{"groups.parquet", Encoding{Format: "parquet", Compression: "snappy", Schema: orders.Schema, RowGroupBytes: 20 << 10}, false},
	{"zstd-checked.parquet", Encoding{Format: "parquet", Schema: orders.Schema}, true},
	{"groups-checked.parquet", Encoding{Format: "parquet", Compression: "snappy", Schema: orders.Schema, RowGroupBytes: 20 << 10}, true},
}

// appendAll appends recs in batches of 10 as producer "p", returning the
// records of the batches accepted.
func appendAll(tx *Txn, recs [][]byte) (accepted [][]byte, err error) {
	return appendChecked(nil, tx, recs, nil)
}

// checkBatch returns what the write path's strict check of s keeps of
// batch's records.
func checkBatch(t testing.TB, s *streamconf.Schema, batch []byte) *streamconf.Checked {
	t.Helper()
	chk, c := s.NewChecker(true), streamconf.NewChecked(s, 10)
	for rec := range bytes.SplitSeq(bytes.TrimSuffix(batch, []byte{'\n'}), []byte{'\n'}) {
		vals, err := chk.Fields(rec)
		if err != nil || !c.Add(rec, vals) {
			t.Fatalf("check %s: %v", rec, err)
		}
	}
	return c
}

// appendChecked is appendAll with each batch's checked values of schema s
// (nil: none).
func appendChecked(t testing.TB, tx *Txn, recs [][]byte, s *streamconf.Schema) (accepted [][]byte, err error) {
	for i := 0; i < len(recs); i += 10 {
		var batch []byte
		j := min(i+10, len(recs))
		for _, r := range recs[i:j] {
			batch = append(append(batch, r...), '\n')
		}
		var c *streamconf.Checked
		if s != nil {
			c = checkBatch(t, s, batch)
		}
		if e := tx.AppendChecked(batch, j-i, "p", int64(i/10), c); e != nil {
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

// preCommitRead pre-commits tx and reads its temp file from fs; any
// failure ends the test.
func preCommitRead(t testing.TB, fs afero.Fs, tx *Txn) (Summary, []byte) {
	t.Helper()
	sum, err := tx.PreCommit()
	if err != nil {
		t.Fatal(err)
	}
	data, err := afero.ReadFile(fs, sum.Temp)
	if err != nil {
		t.Fatal(err)
	}
	return sum, data
}

func checkedSchema(checked bool, e Encoding) *streamconf.Schema {
	if checked {
		return e.Schema
	}
	return nil
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
				if _, err := appendChecked(t, tx, recs, checkedSchema(tt.checked, tt.enc)); err != nil {
					t.Fatal(err)
				}
				sum, err := tx.PreCommit()
				if err != nil {
					t.Fatal(err)
				}
				if sum.Temp != EncodedName(TempName("/s", tt.name)) || sum.Plain != TempName("/s", tt.name) {
					t.Fatalf("summary names %q from %q", sum.Temp, sum.Plain)
				}
				// The Parquet page file is gone once pre-commit returns:
				// only the plain and the encoded file are left.
				if names, _ := List(fs, "/s"); len(names) != 2 {
					t.Fatalf("after pre-commit: %v", names)
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
	kinds := faultfs.Kinds(faultfs.OpOpen, faultfs.OpWrite, faultfs.OpSync, faultfs.OpClose, faultfs.OpRead, faultfs.OpTruncate, faultfs.OpRemove)
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
				// A failed step is told at once, and from then on every
				// batch is refused with its error: only the batch whose
				// append ran the step (inline) is in the file after it.
				var told error
				toldAt := int64(-1)
				tx.OnEncodeFail(func(err error) {
					if told != nil {
						t.Errorf("told twice: %v, then %v", told, err)
					}
					told, toldAt = err, tx.Records()
				})
				accepted, _ := appendChecked(t, tx, recs, checkedSchema(tt.checked, tt.enc))
				if told != nil {
					if got := int64(len(accepted)) - toldAt; got > 10 {
						t.Fatalf("step failed (%v) with %d records accepted; %d more accepted after it", told, toldAt, got)
					}
					if err := tx.Err(); !errors.Is(err, told) {
						t.Fatalf("step failed (%v); Err is %v", told, err)
					}
					if err := tx.Append([]byte("{}\n"), 1, "p", 99); !errors.Is(err, ErrBroken) || !errors.Is(err, told) {
						t.Fatalf("step failed (%v); a later append: %v", told, err)
					}
					if op, _ := inj.Fired(); errno == syscall.ENOSPC && op.Kind == faultfs.OpOpen && (op.Path == EncodedName(name) || op.Path == PagesName(name)) && !errors.Is(told, durable.ErrDiskFull) {
						t.Fatalf("fault %v: the step's error %v is not ErrDiskFull", op, told)
					}
				}
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
// group being built (a page buffer per column; its compressed pages wait
// in the page file, PagesName), not its file's size: measured as live heap after full GCs, with 16 files
// open at once, each 6 MiB into an 8 MiB row group (the worst point: the
// most compressed pages held, none written yet).
func TestCreateEncodedMemoryPerOpenFile(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("memory means nothing under the race detector")
	}
	const files, perFile = 16, 6 << 20
	batches := orders.Batches(orders.Records(t, 14, perFile/100), 100)
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

// Checked values (AppendChecked) are a cache of the parse: the file is
// the one parsing gives, byte for byte; the encoder does take them (a
// batch whose values say other numbers than its bytes, at the same
// lengths, encodes those numbers: what it would do if the write path
// checked other bytes than it appended, which it can't); a batch whose
// append failed leaves no values behind for the next batch at its offset;
// records of other lengths are parsed; and the budget is given back.
func TestCreateEncodedChecked(t *testing.T) {
	enc := Encoding{Format: "parquet", Schema: orders.Schema, RowGroupBytes: 20 << 10}
	recs := orders.Records(t, 15, 2000)
	encode := func(t *testing.T, es *Encoders, s *streamconf.Schema) []byte {
		fs := afero.NewMemMapFs()
		tx, err := CreateEncoded(fs, "/f.parquet.inprogress", 1<<10, enc, es)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := appendChecked(t, tx, recs, s); err != nil {
			t.Fatal(err)
		}
		sum, err := tx.PreCommit()
		if err != nil {
			t.Fatal(err)
		}
		if n := es.kept.Load(); n != 0 {
			t.Fatalf("%d bytes of the budget still taken after pre-commit", n)
		}
		data, err := afero.ReadFile(fs, sum.Temp)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	t.Run("same bytes", func(t *testing.T) {
		want := encode(t, NewInlineEncoders(8<<10), nil)
		for name, es := range map[string]*Encoders{"inline": NewInlineEncoders(8 << 10), "background": NewEncoders(2, 8<<10)} {
			if got := encode(t, es, orders.Schema); !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes with checked values, %d without, not the same", name, len(got), len(want))
			}
		}
		es := NewInlineEncoders(8 << 10)
		es.keptBudget = 0 // nothing kept: every record parsed
		if got := encode(t, es, orders.Schema); !bytes.Equal(got, want) {
			t.Fatal("no budget: not the same bytes")
		}
	})

	a := []byte(`{"id":1,"region":"aa","ts":1000}`)
	b := []byte(`{"id":2,"region":"bb","ts":2000}`)
	batch := func(r []byte) []byte { return append(append([]byte(nil), r...), '\n') }
	run := func(t *testing.T, fs afero.Fs, appends func(tx *Txn) error, want [][]byte) {
		t.Helper()
		es := NewInlineEncoders(8 << 10)
		tx, err := CreateEncoded(fs, "/s/f.parquet.inprogress", 16, enc, es)
		if err != nil {
			t.Fatal(err)
		}
		if err := appends(tx); err != nil {
			t.Fatal(err)
		}
		_, data := preCommitRead(t, fs, tx)
		got, err := format.Preview(bytes.NewReader(data), int64(len(data)), "f.parquet", 10, 0)
		if err != nil || len(got) != len(want) {
			t.Fatalf("%d records, %v; want %d", len(got), err, len(want))
		}
		for i := range want {
			if canonical(t, got[i]) != canonical(t, want[i]) {
				t.Fatalf("record %d: %s, want %s", i, got[i], want[i])
			}
		}
		if n := es.kept.Load(); n != 0 {
			t.Fatalf("%d bytes of the budget still taken", n)
		}
	}
	t.Run("used", func(t *testing.T) {
		run(t, afero.NewMemMapFs(), func(tx *Txn) error {
			return tx.AppendChecked(batch(a), 1, "", 0, checkBatch(t, orders.Schema, batch(b)))
		}, [][]byte{[]byte(`{"id":2,"region":"aa","ts":2000}`)}) // numbers from the values, text from the bytes
	})
	t.Run("other lengths parsed", func(t *testing.T) {
		long := []byte(`{"id":22,"region":"bb","ts":2000}`)
		run(t, afero.NewMemMapFs(), func(tx *Txn) error {
			return tx.AppendChecked(batch(a), 1, "", 0, checkBatch(t, orders.Schema, batch(long)))
		}, [][]byte{a})
	})
	t.Run("failed append", func(t *testing.T) {
		base := faultfs.NewCrashFS()
		if err := durable.MkdirAll(base, "/s"); err != nil {
			t.Fatal(err)
		}
		fs := faultfs.NewInjectFS(base, faultfs.ShortWriteNth(0, syscall.ENOSPC))
		run(t, fs, func(tx *Txn) error {
			if err := tx.AppendChecked(batch(a), 1, "", 0, checkBatch(t, orders.Schema, batch(a))); err == nil {
				t.Fatal("the first append did not fail")
			}
			return tx.AppendChecked(batch(b), 1, "", 1, checkBatch(t, orders.Schema, batch(b)))
		}, [][]byte{b})
	})
	t.Run("abort gives the budget back", func(t *testing.T) {
		es := NewEncoders(1, 1<<30) // no step runs: everything stays queued
		tx, err := CreateEncoded(afero.NewMemMapFs(), "/f.parquet.inprogress", 1<<10, enc, es)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := appendChecked(t, tx, recs[:100], orders.Schema); err != nil {
			t.Fatal(err)
		}
		if es.kept.Load() == 0 {
			t.Fatal("nothing queued")
		}
		if err := tx.Abort(); err != nil {
			t.Fatal(err)
		}
		if n := es.kept.Load(); n != 0 {
			t.Fatalf("%d bytes of the budget still taken after the abort", n)
		}
	})
}

// A Parquet transaction keeps its row group's compressed pages in a temp
// file of its own (PagesName) while it encodes: a temp file of the
// staging directory, which List (and so recovery) sees, and which the
// abort deletes.
func TestCreateEncodedPageFile(t *testing.T) {
	recs := orders.Records(t, 15, 3000)
	fs := afero.NewMemMapFs()
	name := TempName("/s", "p.parquet")
	tx, err := CreateEncoded(fs, name, 1<<10, Encoding{Format: "parquet", Schema: orders.Schema, RowGroupBytes: 64 << 10}, NewInlineEncoders(8<<10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendAll(tx, recs); err != nil {
		t.Fatal(err)
	}
	names, _ := List(fs, "/s")
	if want := []string{name, EncodedName(name), PagesName(name)}; !slices.Equal(names, sorted(want)) {
		t.Fatalf("while encoding: %v, want %v", names, sorted(want))
	}
	if fi, err := fs.Stat(PagesName(name)); err != nil || fi.Size() == 0 {
		t.Fatalf("page file: %v, %v", fi, err)
	}
	if err := tx.Abort(); err != nil {
		t.Fatal(err)
	}
	if names, _ := List(fs, "/s"); len(names) != 0 {
		t.Fatalf("after abort: %v", names)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
