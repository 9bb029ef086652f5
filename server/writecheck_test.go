package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// Write-time checks of record content (DESIGN.md "Streams"): what would
// make a commit fail later is refused when the record is written, naming
// its line, and no refusal is a retry loop without end.

// configure puts c in force for stream: the PUT, then a barrier.
func configure(t *testing.T, r *rig, stream string, c streamconf.Config) {
	t.Helper()
	if _, err := r.e.PutStream(context.Background(), stream, c); err != nil {
		t.Fatalf("put stream %s: %v", stream, err)
	}
	r.checkpoint()
}

func writeLines(e *Engine, stream string, lines ...string) (WriteResult, error) {
	data := strings.Join(lines, "\n") + "\n"
	return e.Write(Write{Stream: stream, Ext: "ndjson", Data: []byte(data), Records: len(lines)})
}

func wantRecordError(t *testing.T, err error, class error, line int, field string) {
	t.Helper()
	var re *RecordError
	if !errors.As(err, &re) || !errors.Is(err, class) || re.Line != line || re.Field != field {
		t.Fatalf("write: %v; want a RecordError of line %d, field %q, class %v", err, line, field, class)
	}
}

// wantRefused is wantRecordError for a batch that, if accepted, would
// fail its commit: the failure says what the checkpoint holding it did.
func wantRefused(t *testing.T, r *rig, err error, class error, line int, field string) {
	t.Helper()
	if err == nil {
		r.broken = "the test failed"
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		res, cerr := r.e.Checkpoint(ctx)
		t.Fatalf("the batch was accepted; the checkpoint holding it then: %s %s, %v", res.State, res.Error, cerr)
	}
	wantRecordError(t, err, class, line, field)
}

// osRig is a rig over the real file system (under a temp dir), whose
// limits (PATH_MAX, a file where a directory must go) are what fails a
// commit; MemMapFs has none of them.
func osRig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, afero.NewBasePathFs(afero.NewOsFs(), t.TempDir()))
	r.foreign = true // records of its own
	return r
}

// TestPartitionsOverOpenFilesRefused: a batch spanning more partitions
// than --max-open-files can never be accepted: it is refused with
// invalid_partition at the first record over the limit, on every try, not
// answered 429 forever (which wedged its producer). A batch that fits the
// limit but not in what is left open now is backpressure, starts a
// checkpoint early and goes in after it; nothing empty is committed.
func TestPartitionsOverOpenFilesRefused(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	var files []int64
	r.tweak = func(c *Config) {
		c.MaxOpenFiles = 2
		c.Hooks.Checkpoint = func(res CheckpointResult) {
			for _, f := range res.Files {
				files = append(files, f.Records)
			}
		}
	}
	e := r.start(nil)
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}"})
	for try := range 3 {
		_, err := writeLines(e, "ev", `{"k":"a"}`, `{"k":"b"}`, `{"k":"a"}`, `{"k":"c"}`)
		wantRecordError(t, err, ErrTooManyPartitions, 4, "")
		if !errors.Is(err, layout.ErrInvalidPartition) || errors.Is(err, ErrBackpressure) {
			t.Fatalf("try %d: %v, want invalid_partition, never backpressure", try, err)
		}
		r.checkpoint()
	}
	if _, err := writeLines(e, "ev", `{"k":"x"}`); err != nil {
		t.Fatal(err)
	}
	id := e.Status().OpenID
	if _, err := writeLines(e, "ev", `{"k":"a"}`, `{"k":"b"}`); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("a batch of 2 partitions with 1 of 2 files left: %v, want backpressure", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Wait(ctx, id); err != nil {
		t.Fatalf("the early checkpoint %d: %v", id, err)
	}
	if _, err := writeLines(e, "ev", `{"k":"a"}`, `{"k":"b"}`); err != nil {
		t.Fatalf("after the early checkpoint: %v", err)
	}
	r.checkpoint()
	if fmt.Sprint(files) != "[1 1 1]" {
		t.Fatalf("committed files of %v records, want [1 1 1]: no empty file", files)
	}
}

// TestStreamMaxPartitions: a stream's max_partitions bounds its partitions
// per checkpoint: a batch over it alone is refused (400), one over it with
// what the stream has open waits for the next checkpoint (429); other
// streams are not held back by it.
func TestStreamMaxPartitions(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	e := r.start(nil)
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}", MaxPartitions: 2})
	configure(t, r, "other", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}"})
	_, err := writeLines(e, "ev", `{"k":"a"}`, `{"k":"b"}`, `{"k":"c"}`)
	wantRecordError(t, err, ErrTooManyPartitions, 3, "")
	if _, err := writeLines(e, "ev", `{"k":"a"}`, `{"k":"b"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := writeLines(e, "ev", `{"k":"b"}`, `{"k":"a"}`); err != nil {
		t.Fatalf("partitions open already: %v", err)
	}
	if _, err := writeLines(e, "other", `{"k":"a"}`, `{"k":"b"}`, `{"k":"c"}`); err != nil {
		t.Fatalf("another stream: %v", err)
	}
	id := e.Status().OpenID
	if _, err := writeLines(e, "ev", `{"k":"c"}`); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("a third partition of ev in one checkpoint: %v, want backpressure", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Wait(ctx, id); err != nil {
		t.Fatalf("the early checkpoint %d: %v", id, err)
	}
	if _, err := writeLines(e, "ev", `{"k":"c"}`); err != nil {
		t.Fatalf("after the early checkpoint: %v", err)
	}
}

// TestSplitBatchHeld: the pieces of a batch spanning partitions are asked
// of Write.Hold before they are made, and a refusal refuses the batch;
// a batch of one partition needs nothing.
func TestSplitBatchHeld(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	e := r.start(nil)
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}"})
	var held []int64
	full := errors.New("budget full")
	hold := func(n int64) error { held = append(held, n); return full }
	data := []byte(`{"k":"a"}` + "\n" + `{"k":"a"}` + "\n")
	if _, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: data, Records: 2, Hold: hold}); err != nil || len(held) != 0 {
		t.Fatalf("one partition: %v, held %v", err, held)
	}
	data = []byte(`{"k":"a"}` + "\n" + `{"k":"b"}` + "\n")
	if _, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: data, Records: 2, Hold: hold}); !errors.Is(err, full) {
		t.Fatalf("two partitions, hold refused: %v", err)
	}
	if want := int64(len(data) + 4*2); len(held) != 1 || held[0] != want {
		t.Fatalf("held %v, want [%d]", held, want)
	}
	if st := e.Status(); st.OpenRecords != 2 {
		t.Fatalf("%d records open, want the first batch's 2", st.OpenRecords)
	}
}

// limited is a committer with the limits of an S3 bucket behind a prefix.
type limited struct {
	*local.Local
	lim committer.Limits
}

func (l limited) Limits() committer.Limits { return l.lim }

// TestKeyTooLongRefused: a record whose partition makes a file name longer
// than the destination takes (an S3 key over 1,024 bytes with several
// {field:...} of 200 bytes) is refused at write time, naming its line; it
// used to be accepted and abort every checkpoint.
func TestKeyTooLongRefused(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	r.tweak = func(c *Config) {
		c.Committer = limited{Local: local.New(c.FS, rigDest, rigStaging), lim: committer.Limits{MaxName: 1024 - len("prefix/")}}
	}
	e := r.start(nil)
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "a={field:a}/b={field:b}/c={field:c}/d={field:d}/e={field:e}"})
	v := strings.Repeat("v", 200)
	ok := fmt.Sprintf(`{"a":"%s","b":"%s","c":"%s","d":"x","e":"x"}`, v, v, v)
	long := fmt.Sprintf(`{"a":"%s","b":"%s","c":"%s","d":"%s","e":"%s"}`, v, v, v, v, v)
	_, err := writeLines(e, "ev", ok, ok, long)
	wantRefused(t, r, err, ErrNameTooLong, 3, "")
	if !errors.Is(err, layout.ErrInvalidPartition) {
		t.Fatalf("%v: want invalid_partition", err)
	}
	if _, err := writeLines(e, "ev", ok); err != nil {
		t.Fatal(err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || len(res.Files) != 1 || len(res.Files[0].Final) > 1024-len("prefix/") {
		t.Fatalf("checkpoint: %+v", res)
	}
}

// TestPathTooLongRefused: on a local destination a partition path that
// takes a file's path over PATH_MAX is refused at write time; it used to
// be accepted, and the prepared checkpoint's commit failed on every try.
func TestPathTooLongRefused(t *testing.T) {
	r := osRig(t)
	// A deep destination: its files' paths get near PATH_MAX.
	dest := rigDest + strings.Repeat("/"+strings.Repeat("d", 200), 5)
	r.tweak = func(c *Config) { c.Committer = local.New(c.FS, dest, rigStaging) }
	r.broken = "files go to a deeper destination than the checker's"
	e := r.start(nil)
	var tmpl, rec []string
	for i := range 16 {
		tmpl = append(tmpl, fmt.Sprintf("f%02d={field:f%02d}", i, i))
		rec = append(rec, fmt.Sprintf(`"f%02d":"%s"`, i, strings.Repeat("v", 200)))
	}
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: strings.Join(tmpl, "/")})
	_, err := writeLines(e, "ev", `{"f00":"x","f01":"x","f02":"x","f03":"x","f04":"x","f05":"x","f06":"x","f07":"x","f08":"x","f09":"x","f10":"x","f11":"x","f12":"x","f13":"x","f14":"x","f15":"x"}`,
		"{"+strings.Join(rec, ",")+"}")
	wantRefused(t, r, err, ErrNameTooLong, 2, "")
	if _, err := writeLines(e, "ev", `{"f00":"x","f01":"x","f02":"x","f03":"x","f04":"x","f05":"x","f06":"x","f07":"x","f08":"x","f09":"x","f10":"x","f11":"x","f12":"x","f13":"x","f14":"x","f15":"x"}`); err != nil {
		t.Fatal(err)
	}
	r.commit()
}

// TestPartitionOverPartFileRefused: after a template gains a level, a
// record whose new level's value is the name of a part file the old
// template committed would need a directory where that file is. It is
// refused at write time; it used to be accepted, and the commit failed
// on every try, restarts included.
func TestPartitionOverPartFileRefused(t *testing.T) {
	r := osRig(t)
	e := r.start(nil)
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "{field:a}"})
	if _, err := writeLines(e, "ev", `{"a":"x","b":"y"}`); err != nil {
		t.Fatal(err)
	}
	res := r.checkpoint()
	if res.State != recovery.Committed || len(res.Files) != 1 {
		t.Fatalf("checkpoint: %+v", res)
	}
	name := path.Base(res.Files[0].Final)
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "{field:a}/{field:b}"})
	_, err := writeLines(e, "ev", `{"a":"x","b":"y"}`, fmt.Sprintf(`{"a":"x","b":%q}`, name))
	wantRefused(t, r, err, layout.ErrInvalidPartition, 2, "b")
	if _, err := writeLines(e, "ev", `{"a":"x","b":"y"}`); err != nil {
		t.Fatal(err)
	}
	r.commit()
}

// TestParquetRecordOverEncoderLimit: a record larger than the Parquet
// encoder takes (possible with --max-record raised) is refused at write
// time as too large; it used to be accepted, then failed encoding and
// aborted the checkpoint with every stream's batches.
func TestParquetRecordOverEncoderLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a 64 MiB record")
	}
	r := newRig(t, nil)
	r.foreign = true
	e := r.start(nil)
	configure(t, r, "pq", streamconf.Config{Format: streamconf.FormatParquet,
		Schema: &streamconf.Schema{Fields: []streamconf.Field{{Name: "v", Type: streamconf.TypeJSON}}}})
	big := `{"v":"` + strings.Repeat("x", staging.MaxRecordBytes) + `"}`
	_, err := writeLines(e, "pq", `{"v":1}`, big)
	wantRefused(t, r, err, ErrRecordTooLarge, 2, "")
	if _, err := writeLines(e, "pq", `{"v":1}`); err != nil {
		t.Fatal(err)
	}
	r.commit()
}

// TestMaxPartitionsNotRolls: max_partitions counts partitions, not the
// files a partition rolls over to.
func TestMaxPartitionsNotRolls(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	e := r.start(nil)
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}", MaxPartitions: 1, RollSize: streamconf.MinRollSize})
	rec := `{"k":"a","pad":"` + strings.Repeat("p", 3000) + `"}`
	for i := range 4 {
		if _, err := writeLines(e, "ev", rec, rec); err != nil {
			t.Fatalf("batch %d into the one partition: %v", i, err)
		}
	}
	if res := r.checkpoint(); res.State != recovery.Committed || len(res.Files) != 4 {
		t.Fatalf("checkpoint: %s, %d files, want 4 (rolled)", res.State, len(res.Files))
	}
}

// A Parquet stream's batch keeps what its check found for the encoder
// (staging.Txn.AppendChecked): each piece of a batch split over
// partitions gets its own records' values, in order, as Fields gives them
// for those bytes; a stream whose files are not Parquet keeps nothing.
func TestPlaceKeepsChecked(t *testing.T) {
	var data []byte
	for i := range 9 {
		data = fmt.Appendf(data, `{"s":"s%d","q":%d,"i":%d,"n":%d,"p":"x\"%d"}`+"\n", i%3, i*7, -i, 1<<40+i, i)
	}
	w := Write{Stream: "pq", Ext: "ndjson", Data: data, Records: 9}
	for _, tt := range []struct {
		conf   streamconf.Config
		pieces int
		kept   bool
	}{
		{streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema}, 1, true},
		{streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema, Partition: "s={field:s}"}, 3, true},
		{streamconf.Config{Format: streamconf.FormatNDJSON, Schema: testSchema, Compression: streamconf.CompressionZstd, Partition: "s={field:s}"}, 3, false},
	} {
		sc, err := compileConf(tt.conf)
		if err != nil {
			t.Fatal(err)
		}
		p := sc.place(time.Now(), &w, placeLimits{})
		if p.err != nil || len(p.pieces) != tt.pieces {
			t.Fatalf("%+v: %d pieces, %v", tt.conf, len(p.pieces), p.err)
		}
		chk := testSchema.NewChecker(true)
		out := make([]streamconf.Value, len(testSchema.Fields))
		for _, pc := range p.pieces {
			if !tt.kept {
				if pc.checked != nil {
					t.Fatalf("%+v: values kept", tt.conf)
				}
				continue
			}
			if pc.checked == nil || pc.checked.Len() != pc.records || pc.checked.Schema != sc.enc.Schema {
				t.Fatalf("%+v: piece %s: %v for %d records", tt.conf, pc.part, pc.checked, pc.records)
			}
			for i, rec := range bytes.Split(bytes.TrimSuffix(pc.data, []byte{'\n'}), []byte{'\n'}) {
				want, err := chk.Fields(rec)
				if err != nil {
					t.Fatal(err)
				}
				if !pc.checked.Value(i, rec, out) {
					t.Fatalf("piece %s record %d: no values", pc.part, i)
				}
				for j := range want {
					if !bytes.Equal(out[j].Raw, want[j].Raw) || out[j].Int != want[j].Int || math.Float64bits(out[j].Float) != math.Float64bits(want[j].Float) {
						t.Fatalf("piece %s record %d field %d: %+v, want %+v", pc.part, i, j, out[j], want[j])
					}
				}
			}
		}
	}
}

// TestMaxOpenFiles: at most MaxOpenFiles transactions (open staging files)
// per checkpoint; the next one is refused with backpressure and starts a
// checkpoint early, after which writes go on. With interval 0 too: the
// limit protects the process, whatever the checkpoint schedule.
func TestMaxOpenFiles(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Hour} {
		r := newRig(t, nil)
		r.tweak = func(c *Config) { c.MaxOpenFiles = 3; c.CheckpointInterval = interval }
		e := r.start(nil)
		streams := []string{"a", "b", "c", "d", "e"}
		must := map[invariant.BatchID]bool{}
		refused := 0
		for i, s := range streams {
			for {
				_, err := send(e, nil, s, int64(i), 2)
				if err == nil {
					must[invariant.BatchID{Stream: s, Seq: int64(i)}] = true
					break
				}
				if !errors.Is(err, ErrBackpressure) {
					t.Fatalf("interval %v: write to stream %s: %v, want backpressure", interval, s, err)
				}
				if st := e.Status(); st.OpenFiles > 3 {
					t.Fatalf("%d files open, limit 3", st.OpenFiles)
				}
				refused++
				time.Sleep(time.Millisecond)
				if refused > 5000 {
					t.Fatalf("interval %v: stream %s refused for 5 s: no early checkpoint", interval, s)
				}
			}
		}
		if refused == 0 {
			t.Fatalf("interval %v: 5 streams, limit 3, never refused", interval)
		}
		r.commit()
		r.check(invariant.Expect{Must: must, Exact: true})
		r.stop()
	}
}

// TestTooManyOpenFiles: a staging file that cannot be opened for lack of
// file descriptors is backpressure (429), not an internal error.
func TestTooManyOpenFiles(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		base := afero.NewMemMapFs()
		var sw faultfs.SwapInjector
		fs := faultfs.NewInjectFS(base, &sw)
		r := newRig(t, fs)
		e := r.start(nil)
		sw.Set(faultfs.FailNth(0, faultfs.Kinds(faultfs.OpOpen), errno))
		if _, err := send(e, nil, "s", 1, 2); !errors.Is(err, ErrBackpressure) {
			t.Fatalf("%v: write: %v, want backpressure", errno, err)
		}
		sw.Set(nil)
		if _, err := send(e, nil, "s", 2, 2); err != nil {
			t.Fatalf("%v: write after: %v", errno, err)
		}
		r.checkpoint()
		r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 2}: true}, Exact: true})
		r.stop()
	}
}
