// Package committertest is the conformance suite every committer must pass:
// the committer.Committer, committer.Publisher and committer.Reader
// contracts, checked from the outside. An implementation's tests call Run
// with a function that builds a fresh, empty Env per case.
package committertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// Env is one empty destination and its staging area.
type Env struct {
	Committer committer.Committer
	Publisher committer.Publisher
	Reader    committer.Reader
	// FS holds the staging files (committer.File.Temp).
	FS afero.Fs
	// TempPath returns the staging path for a file that will be final,
	// in a directory that exists.
	TempPath func(final string) string
	// Leftovers, if set, lists what Prepare made for f that is not visible
	// through Reader (uploads, staging objects), to check that Abort
	// removed all of it.
	Leftovers func(ctx context.Context, f committer.File) ([]string, error)
}

// Run runs every case, each on a new Env from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	runParallel(t, newEnv, []testCase[Env]{
		{"PrepareCommitExactBytes", testPrepareCommit},
		{"EmptyFile", testEmptyFile},
		{"NothingVisibleBeforeCommit", testNothingVisibleBeforeCommit},
		{"CommitTwice", testCommitTwice},
		{"CommitAfterCrashTempLeft", testCommitTempLeft},
		{"AbortAfterPrepare", testAbortAfterPrepare},
		{"AbortWithoutPrepare", testAbortWithoutPrepare},
		{"CommitAfterAbortIsLost", testCommitAfterAbort},
		{"ConflictLeavesExistingContent", testConflict},
		{"ConcurrentFiles", testConcurrentFiles},
		{"BatchCommitThenSync", testBatchCommit},
		{"PublishCreateOnly", testPublishCreateOnly},
		{"ListPrefixes", testList},
		{"ListPagesInPathOrder", testListPages},
		{"OpenMissing", testOpenMissing},
		{"OpenSeek", testOpenSeek},
		{"MoveIdempotent", testMove},
		{"RemoveOwnDocumentsOnly", testRemove},
	})
}

// testCase is one case of a contract suite, run on a fresh E.
type testCase[E any] struct {
	name string
	fn   func(t *testing.T, e E)
}

// runParallel runs each case as a parallel subtest, each on its own E
// from newE.
func runParallel[E any](t *testing.T, newE func(t *testing.T) E, cases []testCase[E]) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newE(t))
		})
	}
}

// Content returns n reproducible bytes of NDJSON-like lines for seed.
func Content(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, 0, n+64)
	for len(b) < n {
		b = fmt.Appendf(b, "{\"seed\":%d,\"v\":%d}\n", seed, r.Uint64())
	}
	return b[:n]
}

// Stage writes data as the staging file of final and returns its File, as
// the staging step hands it to Prepare.
func Stage(t testing.TB, e Env, final string, data []byte) committer.File {
	t.Helper()
	temp := e.TempPath(final)
	if err := afero.WriteFile(e.FS, temp, data, 0o644); err != nil {
		t.Fatalf("write staging file: %v", err)
	}
	return committer.File{
		Stream:  "s",
		Temp:    temp,
		Final:   final,
		Bytes:   int64(len(data)),
		Records: int64(bytes.Count(data, []byte("\n"))),
		CRC32C:  staging.CRC32C(data),
	}
}

// Prepare stages data under final and prepares it.
func Prepare(t testing.TB, e Env, final string, data []byte) committer.File {
	t.Helper()
	f, err := e.Committer.Prepare(t.Context(), Stage(t, e, final, data))
	if err != nil {
		t.Fatalf("prepare %s: %v", final, err)
	}
	return f
}

// ReadAll returns the content of name, failing the test if it cannot.
func ReadAll(t testing.TB, r committer.Reader, name string) []byte {
	t.Helper()
	rc, ent, err := r.Open(t.Context(), name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	if int64(len(b)) != ent.Bytes {
		t.Fatalf("open %s: entry says %d bytes, read %d", name, ent.Bytes, len(b))
	}
	return b
}

// WantContent fails the test unless name holds exactly want.
func WantContent(t testing.TB, r committer.Reader, name string, want []byte) {
	t.Helper()
	got := ReadAll(t, r, name)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes %q..., want %d bytes %q...", name, len(got), head(got), len(want), head(want))
	}
}

// WantAbsent fails the test if name can be opened or is listed.
func WantAbsent(t testing.TB, r committer.Reader, name string) {
	t.Helper()
	rc, _, err := r.Open(t.Context(), name)
	if err == nil {
		_ = rc.Close()
		t.Fatalf("%s is visible", name)
	}
	if !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("open %s: %v, want ErrNotFound", name, err)
	}
	ents, err := r.List(t.Context(), "")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, e := range ents {
		if e.Path == name {
			t.Fatalf("%s is listed", name)
		}
	}
}

func wantNoTemp(t testing.TB, e Env, f committer.File) {
	t.Helper()
	if _, err := e.FS.Stat(f.Temp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging file %s: stat error %v, want it gone", f.Temp, err)
	}
}

func wantNoLeftovers(t testing.TB, e Env, f committer.File) {
	t.Helper()
	if e.Leftovers == nil {
		return
	}
	left, err := e.Leftovers(t.Context(), f)
	if err != nil {
		t.Fatalf("leftovers of %s: %v", f.Final, err)
	}
	if len(left) > 0 {
		t.Fatalf("leftovers of %s: %v", f.Final, left)
	}
}

func head(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func final(i int) string {
	return fmt.Sprintf("clicks/dt=2026-11-29/hour=09/part-n1-%020d-%04d.ndjson", 7, i)
}

func testPrepareCommit(t *testing.T, e Env) {
	data := Content(1, 100_000)
	f := Prepare(t, e, final(0), data)
	if err := e.Committer.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit: %v", err)
	}
	WantContent(t, e.Reader, final(0), data)
	wantNoTemp(t, e, f)
	wantNoLeftovers(t, e, f)
	ents, err := e.Reader.List(t.Context(), "clicks/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Path != final(0) || ents[0].Bytes != int64(len(data)) || ents[0].Modified.IsZero() {
		t.Fatalf("list: %+v", ents)
	}
}

func testEmptyFile(t *testing.T, e Env) {
	f := Prepare(t, e, final(0), nil)
	WantAbsent(t, e.Reader, final(0))
	if err := e.Committer.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit: %v", err)
	}
	WantContent(t, e.Reader, final(0), nil)
	if err := e.Committer.Commit(t.Context(), f); err != nil {
		t.Fatalf("second commit: %v", err)
	}
}

func testNothingVisibleBeforeCommit(t *testing.T, e Env) {
	data := Content(2, 10_000)
	f := Prepare(t, e, final(0), data)
	WantAbsent(t, e.Reader, final(0))
	ents, err := e.Reader.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("after prepare, list shows %+v", ents)
	}
	if err := e.Committer.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit: %v", err)
	}
	WantContent(t, e.Reader, final(0), data)
}

func testCommitTwice(t *testing.T, e Env) {
	data := Content(3, 5_000)
	f := Prepare(t, e, final(0), data)
	for i := range 3 {
		if err := e.Committer.Commit(t.Context(), f); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	WantContent(t, e.Reader, final(0), data)
	wantNoTemp(t, e, f)
}

// testCommitTempLeft: the commit took effect but the process died before
// the staging file was removed; the retry must succeed and remove it.
func testCommitTempLeft(t *testing.T, e Env) {
	data := Content(4, 5_000)
	f := Prepare(t, e, final(0), data)
	if err := e.Committer.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := afero.WriteFile(e.FS, f.Temp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Committer.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit with the staging file back: %v", err)
	}
	WantContent(t, e.Reader, final(0), data)
	wantNoTemp(t, e, f)
}

func testAbortAfterPrepare(t *testing.T, e Env) {
	f := Prepare(t, e, final(0), Content(5, 20_000))
	for i := range 2 {
		if err := e.Committer.Abort(t.Context(), f); err != nil {
			t.Fatalf("abort %d: %v", i, err)
		}
		WantAbsent(t, e.Reader, final(0))
		wantNoTemp(t, e, f)
		wantNoLeftovers(t, e, f)
	}
}

func testAbortWithoutPrepare(t *testing.T, e Env) {
	// As recovery sees an intent recorded before Prepare ran.
	f := Stage(t, e, final(0), Content(6, 1000))
	if err := e.Committer.Abort(t.Context(), f); err != nil {
		t.Fatalf("abort: %v", err)
	}
	wantNoTemp(t, e, f)
	// Nothing at all: not even the staging file.
	if err := e.Committer.Abort(t.Context(), f); err != nil {
		t.Fatalf("abort of nothing: %v", err)
	}
	WantAbsent(t, e.Reader, final(0))
}

func testCommitAfterAbort(t *testing.T, e Env) {
	f := Prepare(t, e, final(0), Content(7, 1000))
	if err := e.Committer.Abort(t.Context(), f); err != nil {
		t.Fatalf("abort: %v", err)
	}
	err := e.Committer.Commit(t.Context(), f)
	if !errors.Is(err, committer.ErrLost) {
		t.Fatalf("commit after abort: %v, want ErrLost", err)
	}
	WantAbsent(t, e.Reader, final(0))
}

// testConflict: a final name holding other content of the same size is
// never replaced (I7).
func testConflict(t *testing.T, e Env) {
	ours, theirs := Content(8, 4096), Content(9, 4096)
	if err := e.Publisher.Publish(t.Context(), final(0), theirs); err != nil {
		t.Fatalf("publish: %v", err)
	}
	f := Stage(t, e, final(0), ours)
	g, err := e.Committer.Prepare(t.Context(), f)
	if err == nil {
		err = e.Committer.Commit(t.Context(), g)
	} else {
		g = f
	}
	if !errors.Is(err, committer.ErrConflict) {
		t.Fatalf("prepare+commit over other content: %v, want ErrConflict", err)
	}
	WantContent(t, e.Reader, final(0), theirs)
	if err := e.Committer.Abort(t.Context(), g); err != nil {
		t.Fatalf("abort: %v", err)
	}
	WantContent(t, e.Reader, final(0), theirs)
}

func testConcurrentFiles(t *testing.T, e Env) {
	const n = 8
	files := make([]committer.File, n)
	for i := range n {
		files[i] = Stage(t, e, final(i), Content(uint64(100+i), 3000+i))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			f, err := e.Committer.Prepare(t.Context(), files[i])
			if err == nil {
				err = e.Committer.Commit(t.Context(), f)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		WantContent(t, e.Reader, final(i), Content(uint64(100+i), 3000+i))
	}
}

// testBatchCommit: a committer.BatchCommitter commits files unsynced,
// concurrently, then syncs each distinct token once; committing again
// (a replay) succeeds and owes a sync again. Others skip.
func testBatchCommit(t *testing.T, e Env) {
	bc, ok := e.Committer.(committer.BatchCommitter)
	if !ok {
		t.Skip("not a committer.BatchCommitter")
	}
	const n = 6
	name := func(i int) string {
		return fmt.Sprintf("s/dt=2026-11-29/hour=%02d/part-n-%020d-%04d.ndjson", i%2, 1, i)
	}
	files := make([]committer.File, n)
	for i := range n {
		files[i] = Prepare(t, e, name(i), Content(uint64(200+i), 1000+i))
	}
	for round := range 2 {
		tokens := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { tokens[i], errs[i] = bc.CommitUnsynced(t.Context(), files[i]) })
		}
		wg.Wait()
		owed := map[string]bool{}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: commit unsynced %d: %v", round, i, err)
			}
			if tokens[i] != "" {
				owed[tokens[i]] = true
			}
		}
		for tok := range owed {
			if err := bc.SyncCommits(t.Context(), tok); err != nil {
				t.Fatalf("round %d: sync %q: %v", round, tok, err)
			}
		}
		for i := range n {
			WantContent(t, e.Reader, name(i), Content(uint64(200+i), 1000+i))
			wantNoTemp(t, e, files[i])
		}
	}
	// Committed unsynced and then Commit (a retry through the plain path)
	// agree: the file is final, the temp gone.
	if err := e.Committer.Commit(t.Context(), files[0]); err != nil {
		t.Fatalf("commit after a batch commit: %v", err)
	}
}

func testPublishCreateOnly(t *testing.T, e Env) {
	name := "_manifests/n1/00000000000000000007.json"
	first, second := []byte(`{"checkpoint":7}`), []byte(`{"checkpoint":7,"other":true}`)
	if err := e.Publisher.Publish(t.Context(), name, first); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := e.Publisher.Publish(t.Context(), name, second); !errors.Is(err, committer.ErrExists) {
		t.Fatalf("second publish: %v, want ErrExists", err)
	}
	if err := e.Publisher.Publish(t.Context(), name, first); !errors.Is(err, committer.ErrExists) {
		t.Fatalf("same publish again: %v, want ErrExists", err)
	}
	WantContent(t, e.Reader, name, first)
}

func testList(t *testing.T, e Env) {
	files := map[string][]byte{
		"s1/dt=1/a.ndjson":        Content(20, 10),
		"s1/dt=2/b.ndjson":        Content(21, 20),
		"s1/dt=2/c.txt":           Content(22, 30),
		"s10/dt=1/d.ndjson":       Content(23, 40),
		"_manifests/n1/0001.json": Content(24, 50),
	}
	// Two of them through the committer, the rest published.
	for i, name := range []string{"s1/dt=2/b.ndjson", "s10/dt=1/d.ndjson"} {
		f := Prepare(t, e, name, files[name])
		if err := e.Committer.Commit(t.Context(), f); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	for _, name := range []string{"s1/dt=1/a.ndjson", "s1/dt=2/c.txt", "_manifests/n1/0001.json"} {
		if err := e.Publisher.Publish(t.Context(), name, files[name]); err != nil {
			t.Fatal(err)
		}
	}
	// A prepared file is not listed anywhere.
	Prepare(t, e, "s1/dt=3/pending.ndjson", Content(25, 60))

	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"_manifests/n1/0001.json", "s1/dt=1/a.ndjson", "s1/dt=2/b.ndjson", "s1/dt=2/c.txt", "s10/dt=1/d.ndjson"}},
		{"s1/", []string{"s1/dt=1/a.ndjson", "s1/dt=2/b.ndjson", "s1/dt=2/c.txt"}},
		{"s1", []string{"s1/dt=1/a.ndjson", "s1/dt=2/b.ndjson", "s1/dt=2/c.txt", "s10/dt=1/d.ndjson"}},
		{"s1/dt=2/", []string{"s1/dt=2/b.ndjson", "s1/dt=2/c.txt"}},
		{"s1/dt=2/b", []string{"s1/dt=2/b.ndjson"}},
		{"s1/dt=3/", nil},
		{"_manifests/", []string{"_manifests/n1/0001.json"}},
		{"nope/", nil},
	} {
		ents, err := e.Reader.List(t.Context(), c.prefix)
		if err != nil {
			t.Fatalf("list %q: %v", c.prefix, err)
		}
		var got []string
		for _, ent := range ents {
			got = append(got, ent.Path)
			if ent.Bytes != int64(len(files[ent.Path])) {
				t.Errorf("list %q: %s has %d bytes, want %d", c.prefix, ent.Path, ent.Bytes, len(files[ent.Path]))
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("list %q: got %q, want %q", c.prefix, got, c.want)
		}
	}
}

// testListPages checks committer.Pager, if the Reader has it: paging with
// every limit yields List's answer exactly, also for names where directory
// order and path order differ ("a-b/" sorts before "a/", "a/" before "a0").
func testListPages(t *testing.T, e Env) {
	pager, ok := e.Reader.(committer.Pager)
	if !ok {
		t.Skip("the reader has no ListPage")
	}
	names := []string{"a-b/x.ndjson", "a.b/y.ndjson", "a/b-c/z.ndjson", "a/b/z.ndjson", "a/b.ndjson",
		"a0/q.ndjson", "_manifests/n1/0001.json", "_manifests/n1/0002.json", "b/dt=1/hour=0/p.txt"}
	for i, name := range names {
		if err := e.Publisher.Publish(t.Context(), name, Content(uint64(30+i), 5+i)); err != nil {
			t.Fatal(err)
		}
	}
	Prepare(t, e, "a/pending.ndjson", Content(40, 10)) // never listed
	for _, prefix := range []string{"", "a", "a/", "a/b", "_manifests/", "b/dt=1/", "zz"} {
		all, err := e.Reader.List(t.Context(), prefix)
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		var want []string
		for _, ent := range all {
			want = append(want, ent.Path)
		}
		for _, limit := range []int{1, 2, 3, 100} {
			var got []string
			after := ""
			for range len(names) + 2 {
				page, err := pager.ListPage(t.Context(), prefix, after, limit)
				if err != nil {
					t.Fatalf("list page %q after %q: %v", prefix, after, err)
				}
				if len(page) > limit {
					t.Fatalf("list page %q after %q: %d entries over limit %d", prefix, after, len(page), limit)
				}
				for _, ent := range page {
					got = append(got, ent.Path)
				}
				if len(page) < limit {
					break
				}
				after = page[len(page)-1].Path
			}
			if !slices.Equal(got, want) {
				t.Errorf("pages of %q by %d: got %q, want %q", prefix, limit, got, want)
			}
		}
		// A cursor that names no file starts right after where it would be.
		page, err := pager.ListPage(t.Context(), prefix, "a/b-", 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ent := range page {
			got = append(got, ent.Path)
		}
		var rest []string
		for _, w := range want {
			if w > "a/b-" {
				rest = append(rest, w)
			}
		}
		if !slices.Equal(got, rest) {
			t.Errorf("page of %q after \"a/b-\": got %q, want %q", prefix, got, rest)
		}
	}
}

func testOpenMissing(t *testing.T, e Env) {
	for _, name := range []string{"missing.ndjson", "a/b/missing.txt", "../x", "/abs", ""} {
		rc, _, err := e.Reader.Open(t.Context(), name)
		if err == nil {
			_ = rc.Close()
			t.Fatalf("open %q succeeded", name)
		}
		if !errors.Is(err, committer.ErrNotFound) {
			t.Fatalf("open %q: %v, want ErrNotFound", name, err)
		}
	}
}

func testOpenSeek(t *testing.T, e Env) {
	data := Content(30, 200_000)
	f := Prepare(t, e, final(0), data)
	if err := e.Committer.Commit(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	rc, ent, err := e.Reader.Open(t.Context(), final(0))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if ent.Path != final(0) || ent.Bytes != int64(len(data)) {
		t.Fatalf("entry %+v", ent)
	}
	read := func(n int) []byte {
		t.Helper()
		b := make([]byte, n)
		if _, err := io.ReadFull(rc, b); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		return b
	}
	seek := func(off int64, whence int, want int64) {
		t.Helper()
		got, err := rc.Seek(off, whence)
		if err != nil || got != want {
			t.Fatalf("seek(%d, %d) = %d, %v; want %d", off, whence, got, err, want)
		}
	}
	if got := read(100); !bytes.Equal(got, data[:100]) {
		t.Fatalf("first 100 bytes differ")
	}
	seek(150_000, io.SeekStart, 150_000)
	if got := read(1000); !bytes.Equal(got, data[150_000:151_000]) {
		t.Fatalf("bytes at 150000 differ")
	}
	seek(-2000, io.SeekCurrent, 149_000)
	if got := read(10); !bytes.Equal(got, data[149_000:149_010]) {
		t.Fatalf("bytes at 149000 differ")
	}
	seek(-50, io.SeekEnd, int64(len(data))-50)
	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rest, data[len(data)-50:]) {
		t.Fatalf("last 50 bytes differ")
	}
	seek(0, io.SeekStart, 0)
	all, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(all, data) {
		t.Fatalf("full read after seek differs")
	}
}

// testMove: a committed file moves whole, a second move of it is done, a
// move onto other content is refused leaving both, and a move of nothing
// is not found (committer.Mover, optional).
func testMove(t *testing.T, e Env) {
	mv, ok := e.Committer.(committer.Mover)
	if !ok {
		t.Skip("not a committer.Mover")
	}
	ctx := t.Context()
	data := Content(7, 3000)
	f := Prepare(t, e, "s/dt=1/part-n-00000000000000000001-0000.ndjson", data)
	if err := e.Committer.Commit(ctx, f); err != nil {
		t.Fatal(err)
	}
	to := "_quarantine/n/" + f.Final
	for try := range 2 {
		if err := mv.Move(ctx, f.Final, to); err != nil {
			t.Fatalf("move (try %d): %v", try, err)
		}
	}
	if got := ReadAll(t, e.Reader, to); !bytes.Equal(got, data) {
		t.Fatalf("moved file holds %d bytes, want the %d committed", len(got), len(data))
	}
	if _, _, err := e.Reader.Open(ctx, f.Final); !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("the old name after a move: %v, want ErrNotFound", err)
	}
	if err := mv.Move(ctx, "s/none", "_quarantine/n/s/none"); !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("move of nothing: %v, want ErrNotFound", err)
	}
	g := Prepare(t, e, "s/dt=1/part-n-00000000000000000002-0000.ndjson", Content(8, 100))
	if err := e.Committer.Commit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := mv.Move(ctx, g.Final, to); !errors.Is(err, committer.ErrConflict) {
		t.Fatalf("move onto other content: %v, want ErrConflict", err)
	}
	if got := ReadAll(t, e.Reader, to); !bytes.Equal(got, data) {
		t.Fatal("a refused move changed its target")
	}
	ReadAll(t, e.Reader, g.Final)
}

// testRemove: a document under _forgotten/ is removed, removing it again
// is done, and any other name — a manifest, a committed file — is refused
// and stays (committer.Remover, optional; I7).
func testRemove(t *testing.T, e Env) {
	rm, ok := e.Publisher.(committer.Remover)
	if !ok {
		t.Skip("not a committer.Remover")
	}
	ctx := t.Context()
	doc := "_forgotten/n/00000000000000000007-0000.json"
	man := "_manifests/n/00000000000000000007.json"
	for _, name := range []string{doc, man} {
		if err := e.Publisher.Publish(ctx, name, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	f := Prepare(t, e, "s/dt=1/part-n-00000000000000000007-0000.ndjson", Content(9, 100))
	if err := e.Committer.Commit(ctx, f); err != nil {
		t.Fatal(err)
	}
	for try := range 2 {
		if err := rm.Remove(ctx, doc); err != nil {
			t.Fatalf("remove (try %d): %v", try, err)
		}
	}
	if _, _, err := e.Reader.Open(ctx, doc); !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("a removed document: %v, want ErrNotFound", err)
	}
	for _, name := range []string{man, f.Final, "_forgotten/../" + man} {
		if err := rm.Remove(ctx, name); err == nil {
			t.Errorf("remove %s: nil, want it refused", name)
		}
	}
	ReadAll(t, e.Reader, man)
	ReadAll(t, e.Reader, f.Final)
}
