package staging

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/spf13/afero"
)

func TestAppendPreCommit(t *testing.T) {
	fs := faultfs.NewCrashFS()
	if err := durable.MkdirAll(fs, "/s"); err != nil {
		t.Fatal(err)
	}
	tx, err := Create(fs, TempName("/s", "part-a.ndjson"), 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(fs, tx.Name(), 16); err == nil {
		t.Fatal("created the same temp file twice")
	}
	batches := []string{"a\n", "bbbbbbbbbbbbbbbbbbbbbbb\n", "c\nd\n"}
	for i, b := range batches {
		if err := tx.Append([]byte(b), strings.Count(b, "\n"), "p", int64(i+3)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Append([]byte("x\n"), 1, "", 0); err != nil {
		t.Fatal(err)
	}
	sum, err := tx.PreCommit()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(batches, "") + "x\n"
	if sum.Bytes != int64(len(want)) || sum.Records != 5 || sum.CRC32C != CRC32C([]byte(want)) || fmt.Sprint(sum.Producers["p"]) != "[[3 5]]" {
		t.Fatalf("summary %+v", sum)
	}
	if err := durable.SyncDir(fs, "/s"); err != nil {
		t.Fatal(err)
	}
	got, err := afero.ReadFile(fs.CrashClone(), tx.Name())
	if err != nil || string(got) != want {
		t.Fatalf("after a power cut: %q %v", got, err)
	}
	if err := tx.Append([]byte("late\n"), 1, "", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after pre-commit: %v", err)
	}
}

// A failed write — short or not — leaves no part of the batch in the file,
// and the earlier batches are still committed whole.
func TestAppendFailureLeavesNoPartialBatch(t *testing.T) {
	for _, short := range []bool{false, true} {
		for n := int64(0); n < 4; n++ {
			base := afero.NewMemMapFs()
			var inj faultfs.Injector = faultfs.FailNth(n, faultfs.Kinds(faultfs.OpWrite), syscall.ENOSPC)
			if short {
				inj = faultfs.ShortWriteNth(n, syscall.ENOSPC)
			}
			fs := faultfs.NewInjectFS(base, inj)
			tx, err := Create(fs, "/t.inprogress", 8)
			if err != nil {
				t.Fatal(err)
			}
			var want strings.Builder
			failed := 0
			for i := range 6 {
				b := strings.Repeat(string(rune('a'+i)), 5+i) + "\n"
				err := tx.Append([]byte(b), 1, "", 0)
				switch {
				case err == nil:
					want.WriteString(b)
				case errors.Is(err, durable.ErrDiskFull):
					failed++
				default:
					t.Fatalf("short=%v n=%d: append: %v", short, n, err)
				}
			}
			if failed != 1 {
				t.Fatalf("short=%v n=%d: %d appends failed, want 1", short, n, failed)
			}
			sum, err := tx.PreCommit()
			if err != nil {
				t.Fatalf("short=%v n=%d: pre-commit: %v", short, n, err)
			}
			got, _ := afero.ReadFile(base, "/t.inprogress")
			if string(got) != want.String() || sum.Bytes != int64(want.Len()) || sum.CRC32C != CRC32C(got) {
				t.Fatalf("short=%v n=%d: file %q, want %q (summary %+v)", short, n, got, want.String(), sum)
			}
		}
	}
}

func TestAbortAndList(t *testing.T) {
	fs := afero.NewMemMapFs()
	a, _ := Create(fs, "/s/a"+Suffix, 0)
	b, _ := Create(fs, "/s/b"+Suffix, 0)
	if err := a.Append([]byte("x\n"), 1, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := a.Abort(); err != nil {
		t.Fatalf("abort twice: %v", err)
	}
	b.Release()
	names, err := List(fs, "/s")
	if err != nil || len(names) != 1 || names[0] != "/s/b"+Suffix || !IsTemp(names[0]) {
		t.Fatalf("list: %v %v", names, err)
	}
	if names, err := List(fs, "/missing"); err != nil || names != nil {
		t.Fatalf("missing dir: %v %v", names, err)
	}
}

func TestSyncFailureIsNotRetried(t *testing.T) {
	fs := faultfs.NewInjectFS(afero.NewMemMapFs(), faultfs.FailNth(0, faultfs.Kinds(faultfs.OpSync), syscall.EIO))
	tx, _ := Create(fs, "/t"+Suffix, 0)
	_ = tx.Append([]byte("x\n"), 1, "", 0)
	if _, err := tx.PreCommit(); !errors.Is(err, durable.ErrSync) {
		t.Fatalf("pre-commit with a failing fsync: %v", err)
	}
	if _, err := tx.PreCommit(); err == nil {
		t.Fatal("a second pre-commit succeeded after a failed fsync")
	}
}

// A file's producer ranges hold exactly the sequence numbers appended to
// it: batches of the same producer that went to another file (another
// extension or partition) or took no file (empty) leave gaps.
func TestProducerRangesExact(t *testing.T) {
	type app struct {
		producer string
		seq      int64
	}
	tests := []struct {
		name    string
		appends []app
		want    map[string]string
	}{
		{"contiguous", []app{{"p", 3}, {"p", 4}, {"p", 5}}, map[string]string{"p": "[[3 5]]"}},
		{"one", []app{{"p", 7}}, map[string]string{"p": "[[7 7]]"}},
		{"gaps", []app{{"p", 0}, {"p", 2}, {"p", 3}, {"p", 7}}, map[string]string{"p": "[[0 0] [2 3] [7 7]]"}},
		{"two producers", []app{{"a", 1}, {"b", 1}, {"a", 2}, {"b", 3}, {"", 0}, {"a", 4}},
			map[string]string{"a": "[[1 2] [4 4]]", "b": "[[1 1] [3 3]]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := Create(afero.NewMemMapFs(), TempName("/s", "part.ndjson"), 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tc.appends {
				if err := tx.Append([]byte("x\n"), 1, a.producer, a.seq); err != nil {
					t.Fatal(err)
				}
			}
			sum, err := tx.PreCommit()
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Producers) != len(tc.want) {
				t.Fatalf("producers %v, want %v", sum.Producers, tc.want)
			}
			for p, want := range tc.want {
				if got := fmt.Sprint(sum.Producers[p]); got != want {
					t.Errorf("producer %s: ranges %s, want %s", p, got, want)
				}
			}
		})
	}
}
