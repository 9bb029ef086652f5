package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/committertest"
	s3 "github.com/eosink/eosink/committer/s3"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/minio/minio-go/v7"
	"github.com/spf13/afero"
)

var shared testsrv.Shared

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// rig is one committer over a fresh prefix of a server's bucket.
type rig struct {
	srv    *testsrv.MinIO
	client *minio.Client
	core   *minio.Core
	s3     *s3.S3
	fs     afero.Fs
	prefix string
}

// forEachMode runs test once per commit mode, each on a rig of its own
// over the shared MinIO.
func forEachMode(t *testing.T, partSize int64, test func(t *testing.T, r *rig)) {
	for _, mode := range []s3.Mode{s3.Multipart, s3.Copy} {
		t.Run(mode.String(), func(t *testing.T) {
			test(t, newRig(t, shared.Get(t), mode, partSize))
		})
	}
}

// dropUpload aborts a prepared file's multipart upload behind the
// committer's back, as the server does when it expires one.
func (r *rig) dropUpload(t *testing.T, key, uploadID string) {
	t.Helper()
	if err := r.core.AbortMultipartUpload(t.Context(), r.srv.Bucket, key, uploadID); err != nil {
		t.Fatal(err)
	}
}

func newRig(t testing.TB, srv *testsrv.MinIO, mode s3.Mode, partSize int64) *rig {
	t.Helper()
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "dest-" + hex.EncodeToString(b[:])
	fsys := afero.NewMemMapFs()
	if err := fsys.MkdirAll("/staging", 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := s3.New(s3.Config{
		Client: client, Bucket: srv.Bucket, Prefix: prefix, Node: "n1",
		Staging: fsys, Mode: mode, PartSize: partSize, Parallel: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{srv: srv, client: client, core: &minio.Core{Client: client}, s3: c, fs: fsys, prefix: prefix}
}

func (r *rig) env() committertest.Env {
	return committertest.Env{
		Committer: r.s3, Publisher: r.s3, Reader: r.s3, FS: r.fs,
		TempPath: func(final string) string {
			return "/staging/" + strings.ReplaceAll(final, "/", "_") + ".inprogress"
		},
		Leftovers: r.leftovers,
	}
}

// commitClean commits f, requires finalName to hold data and nothing of
// the upload to be left.
func (r *rig) commitClean(t *testing.T, f committer.File, finalName string, data []byte) {
	t.Helper()
	if err := r.s3.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit: %v", err)
	}
	committertest.WantContent(t, r.s3, finalName, data)
	left, err := r.leftovers(t.Context(), f)
	if err != nil || len(left) > 0 {
		t.Fatalf("after commit: leftovers %v, %v", left, err)
	}
}

// leftovers lists incomplete uploads on f's final and staging keys, and the
// staging object.
func (r *rig) leftovers(ctx context.Context, f committer.File) ([]string, error) {
	var out []string
	for _, key := range []string{r.s3.Key(f.Final), r.s3.StagingKey(f.Final)} {
		ids, err := r.s3.Uploads(ctx, key)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			out = append(out, "upload "+key+" "+id)
		}
	}
	if f.UploadID != "" {
		_, err := r.core.ListObjectParts(ctx, r.srv.Bucket, r.s3.Key(f.Final), f.UploadID, 0, 1000)
		if err == nil {
			out = append(out, "parts of upload "+f.UploadID)
		} else if minio.ToErrorResponse(err).Code != minio.NoSuchUpload {
			return nil, err
		}
	}
	_, err := r.client.StatObject(ctx, r.srv.Bucket, r.s3.StagingKey(f.Final), minio.StatObjectOptions{})
	if err == nil {
		out = append(out, "object "+r.s3.StagingKey(f.Final))
	} else if minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return nil, err
	}
	return out, nil
}

func TestConformanceMultipart(t *testing.T) {
	srv := shared.Get(t)
	committertest.Run(t, func(t *testing.T) committertest.Env {
		return newRig(t, srv, s3.Multipart, 0).env()
	})
}

func TestConformanceCopy(t *testing.T) {
	srv := shared.Get(t)
	committertest.Run(t, func(t *testing.T) committertest.Env {
		return newRig(t, srv, s3.Copy, 0).env()
	})
}

const finalName = "clicks/dt=2026-11-29/hour=09/part-n1-00000000000000000001-0000.ndjson"

func TestNewRejectsBadConfig(t *testing.T) {
	client, err := minio.New("127.0.0.1:1", &minio.Options{}) // never dialled
	if err != nil {
		t.Fatal(err)
	}
	good := s3.Config{Client: client, Bucket: "b", Node: "eosink-0", Staging: afero.NewMemMapFs()}
	if _, err := s3.New(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mod := range map[string]func(*s3.Config){
		"no client":       func(c *s3.Config) { c.Client = nil },
		"no bucket":       func(c *s3.Config) { c.Bucket = "" },
		"no staging fs":   func(c *s3.Config) { c.Staging = nil },
		"no node":         func(c *s3.Config) { c.Node = "" },
		"node with slash": func(c *s3.Config) { c.Node = "a/b" },
		"node not a node": func(c *s3.Config) { c.Node = "-a" },
		"node dot":        func(c *s3.Config) { c.Node = "." },
		"small parts":     func(c *s3.Config) { c.PartSize = 5<<20 - 1 },
		"bad mode":        func(c *s3.Config) { c.Mode = 7 },
		"bad prefix":      func(c *s3.Config) { c.Prefix = "a/../b" },
	} {
		cfg := good
		mod(&cfg)
		if _, err := s3.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestLargeFileMultipart: 64 MiB and a bit is five 16 MiB parts, and the
// object's ETag says so.
func TestLargeFileMultipart(t *testing.T) {
	r := newRig(t, shared.Get(t), s3.Multipart, 0)
	e := r.env()
	data := committertest.Content(42, 64<<20+1234)
	f := committertest.Prepare(t, e, finalName, data)
	if len(f.Parts) != 5 || f.UploadID == "" {
		t.Fatalf("prepared %d parts, upload %q; want 5 parts", len(f.Parts), f.UploadID)
	}
	var sum int64
	for i, p := range f.Parts {
		if p.Number != i+1 || p.ETag == "" {
			t.Fatalf("part %d: %+v", i, p)
		}
		if i < 4 && p.Size != s3.DefaultPartSize {
			t.Fatalf("part %d: %d bytes, want %d", i, p.Size, s3.DefaultPartSize)
		}
		sum += p.Size
	}
	if sum != int64(len(data)) {
		t.Fatalf("parts hold %d bytes, want %d", sum, len(data))
	}
	committertest.WantAbsent(t, r.s3, finalName)
	if err := r.s3.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit: %v", err)
	}
	info, err := r.client.StatObject(t.Context(), r.srv.Bucket, r.s3.Key(finalName), minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(data)) || !strings.HasSuffix(info.ETag, "-5") {
		t.Fatalf("object: %d bytes, etag %q; want %d bytes, etag ending -5", info.Size, info.ETag, len(data))
	}
	if got := info.UserMetadata["Crc32c"]; got != f.CRC32C {
		t.Fatalf("x-amz-meta-crc32c = %q, want %q", got, f.CRC32C)
	}
	committertest.WantContent(t, r.s3, finalName, data)
}

// TestLargeFileCopy: Copy mode stages a multi-part object and commits it
// with a server-side copy.
func TestLargeFileCopy(t *testing.T) {
	r := newRig(t, shared.Get(t), s3.Copy, s3.MinPartSize)
	e := r.env()
	data := committertest.Content(43, 12<<20+5)
	f := committertest.Prepare(t, e, finalName, data)
	if f.StagingKey != r.s3.StagingKey(finalName) || f.UploadID == "" || f.ETag == "" {
		t.Fatalf("prepared %+v", f)
	}
	if !strings.HasSuffix(f.ETag, "-3") {
		t.Fatalf("staging object etag %q, want a 3-part upload", f.ETag)
	}
	committertest.WantAbsent(t, r.s3, finalName)
	r.commitClean(t, f, finalName, data)
}

// TestAbortAbortsUpload: after Abort, the upload is gone from the server.
func TestAbortAbortsUpload(t *testing.T) {
	forEachMode(t, s3.MinPartSize, func(t *testing.T, r *rig) {
		f := committertest.Prepare(t, r.env(), finalName, committertest.Content(44, 6<<20))
		key := r.s3.Key(finalName)
		ids, err := r.s3.Uploads(t.Context(), key)
		if err != nil || len(ids) != 1 || ids[0] != f.UploadID {
			t.Fatalf("before abort: uploads %v, %v; want [%s]", ids, err, f.UploadID)
		}
		if err := r.s3.Abort(t.Context(), f); err != nil {
			t.Fatalf("abort: %v", err)
		}
		res, err := r.core.ListMultipartUploads(t.Context(), r.srv.Bucket, key, "", "", "", 1000)
		if err != nil || len(res.Uploads) != 0 {
			t.Fatalf("after abort: uploads %+v, %v", res.Uploads, err)
		}
		_, err = r.core.ListObjectParts(t.Context(), r.srv.Bucket, key, f.UploadID, 0, 1000)
		if minio.ToErrorResponse(err).Code != minio.NoSuchUpload {
			t.Fatalf("list parts after abort: %v, want NoSuchUpload", err)
		}
	})
}

// TestAbortIntentWithoutUploadID: a crash between starting an upload and
// recording its id leaves an intent without one; Abort still finds the
// upload on the exact key.
func TestAbortIntentWithoutUploadID(t *testing.T) {
	forEachMode(t, s3.MinPartSize, func(t *testing.T, r *rig) {
		e := r.env()
		intent := committertest.Stage(t, e, finalName, committertest.Content(45, 7<<20))
		// A half-done staging upload too, as a crash mid-Prepare leaves it.
		if _, err := r.core.NewMultipartUpload(t.Context(), r.srv.Bucket, r.s3.StagingKey(finalName), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.s3.Prepare(t.Context(), intent); err != nil {
			t.Fatal(err)
		}
		if err := r.s3.Abort(t.Context(), intent); err != nil {
			t.Fatalf("abort: %v", err)
		}
		left, err := r.leftovers(t.Context(), intent)
		if err != nil || len(left) > 0 {
			t.Fatalf("after abort: leftovers %v, %v", left, err)
		}
		committertest.WantAbsent(t, r.s3, finalName)
	})
}

// TestCommitRace: two different files racing for one final name: exactly
// one wins, the other gets ErrConflict, and the winner's bytes stay.
func TestCommitRace(t *testing.T) {
	r := newRig(t, shared.Get(t), s3.Multipart, 0)
	// A second committer on the same keys with its own staging area, as a
	// misconfigured second process with the same node id would be.
	other := *r
	other.fs = afero.NewMemMapFs()
	var err error
	if other.s3, err = s3.New(s3.Config{Client: r.client, Bucket: r.srv.Bucket, Prefix: r.prefix, Node: "n1", Staging: other.fs}); err != nil {
		t.Fatal(err)
	}
	const n = 6
	data := make([][]byte, n)
	files := make([]committer.File, n)
	for i := range n {
		rg := r
		if i%2 == 1 {
			rg = &other
		}
		data[i] = committertest.Content(uint64(50+i), 3000)
		e := rg.env()
		e.TempPath = func(string) string { return fmt.Sprintf("/staging/race-%d.inprogress", i) }
		files[i] = committertest.Prepare(t, e, finalName, data[i])
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i%2 == 1 {
				errs[i] = other.s3.Commit(t.Context(), files[i])
			} else {
				errs[i] = r.s3.Commit(t.Context(), files[i])
			}
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("files %d and %d both committed", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, committer.ErrConflict):
			t.Fatalf("file %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no file committed")
	}
	committertest.WantContent(t, r.s3, finalName, data[winner])
}

// TestCommitReuploadsWhenUploadGone: the server dropped the prepared upload
// (expiry during an outage); the staging file is still there, so Commit
// uploads again. Without it, the file is lost.
func TestCommitReuploadsWhenUploadGone(t *testing.T) {
	forEachMode(t, 0, func(t *testing.T, r *rig) {
		data := committertest.Content(60, 100_000)
		f := committertest.Prepare(t, r.env(), finalName, data)
		r.dropUpload(t, r.s3.Key(finalName), f.UploadID)
		r.commitClean(t, f, finalName, data)

		g := committertest.Prepare(t, r.env(), "lost.ndjson", data)
		r.dropUpload(t, r.s3.Key(g.Final), g.UploadID)
		if err := r.fs.Remove(g.Temp); err != nil {
			t.Fatal(err)
		}
		if err := r.s3.Commit(t.Context(), g); !errors.Is(err, committer.ErrLost) {
			t.Fatalf("commit with upload and staging file gone: %v, want ErrLost", err)
		}
	})
}

// TestPrepareChecksStagingFile: the bytes uploaded are the bytes recorded.
func TestPrepareChecksStagingFile(t *testing.T) {
	r := newRig(t, shared.Get(t), s3.Multipart, 0)
	f := committertest.Stage(t, r.env(), finalName, []byte("{\"a\":1}\n"))
	bad := f
	bad.CRC32C = "00000000"
	if _, err := r.s3.Prepare(t.Context(), bad); !errors.Is(err, s3.ErrBadStaging) {
		t.Fatalf("prepare with wrong crc: %v, want ErrBadStaging", err)
	}
	bad = f
	bad.Bytes++
	if _, err := r.s3.Prepare(t.Context(), bad); !errors.Is(err, s3.ErrBadStaging) {
		t.Fatalf("prepare with wrong size: %v, want ErrBadStaging", err)
	}
	ids, err := r.s3.Uploads(t.Context(), r.s3.Key(finalName))
	if err != nil || len(ids) != 0 {
		t.Fatalf("uploads after refused prepares: %v, %v", ids, err)
	}
}

// TestOutage: with the server down, every call fails with ErrTransient;
// after it is back, the same prepared file commits.
func TestOutage(t *testing.T) {
	srv := testsrv.StartMinIO(t)
	r := newRig(t, srv, s3.Multipart, 0)
	data := committertest.Content(70, 50_000)
	f := committertest.Prepare(t, r.env(), finalName, data)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := r.s3.Commit(ctx, f); !errors.Is(err, committer.ErrTransient) {
		t.Fatalf("commit while down: %v, want ErrTransient", err)
	}
	g := committertest.Stage(t, r.env(), "other.ndjson", data)
	if _, err := r.s3.Prepare(ctx, g); !errors.Is(err, committer.ErrTransient) {
		t.Fatalf("prepare while down: %v, want ErrTransient", err)
	}
	if err := r.s3.Publish(ctx, "m.json", []byte("{}")); !errors.Is(err, committer.ErrTransient) {
		t.Fatalf("publish while down: %v, want ErrTransient", err)
	}
	if _, err := r.s3.List(ctx, ""); !errors.Is(err, committer.ErrTransient) {
		t.Fatalf("list while down: %v, want ErrTransient", err)
	}
	if _, _, err := r.s3.Open(ctx, finalName); !errors.Is(err, committer.ErrTransient) {
		t.Fatalf("open while down: %v, want ErrTransient", err)
	}
	if err := r.s3.Abort(ctx, g); !errors.Is(err, committer.ErrTransient) {
		t.Fatalf("abort while down: %v, want ErrTransient", err)
	}

	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.s3.Commit(t.Context(), f); err != nil {
		t.Fatalf("commit after restart: %v", err)
	}
	committertest.WantContent(t, r.s3, finalName, data)
}

// TestStagingHiddenFromReader: Copy mode's staging objects are never listed
// or opened, whatever the prefix asked.
func TestStagingHiddenFromReader(t *testing.T) {
	r := newRig(t, shared.Get(t), s3.Copy, 0)
	f := committertest.Prepare(t, r.env(), finalName, []byte("x\n"))
	if _, err := r.client.StatObject(t.Context(), r.srv.Bucket, f.StagingKey, minio.StatObjectOptions{}); err != nil {
		t.Fatalf("staging object: %v", err)
	}
	for _, p := range []string{"", "_staging/", "_staging/n1/"} {
		ents, err := r.s3.List(t.Context(), p)
		if err != nil || len(ents) != 0 {
			t.Fatalf("list %q: %+v, %v", p, ents, err)
		}
	}
	if _, _, err := r.s3.Open(t.Context(), "_staging/n1/"+finalName); !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("open staging object: %v, want ErrNotFound", err)
	}
	if err := r.s3.Publish(t.Context(), "_staging/n1/x", []byte("x")); err == nil {
		t.Fatal("publish under _staging/ accepted")
	}
}

// TestMinIOConditions pins the server behaviour the committer relies on,
// and the one it works around.
func TestMinIOConditions(t *testing.T) {
	r := newRig(t, shared.Get(t), s3.Multipart, 0)
	ctx, b := t.Context(), r.srv.Bucket
	put := func(key, data string, opts minio.PutObjectOptions) error {
		_, err := r.core.PutObject(ctx, b, key, strings.NewReader(data), int64(len(data)), "", "", opts)
		return err
	}
	get := func(key string) string {
		obj, err := r.client.GetObject(ctx, b, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		d, err := io.ReadAll(obj)
		if err != nil {
			t.Fatal(err)
		}
		return string(d)
	}
	createOnly := minio.PutObjectOptions{}
	createOnly.SetMatchETagExcept("*")
	key := r.prefix + "/taken"
	if err := put(key, "first", createOnly); err != nil {
		t.Fatal(err)
	}

	// PutObject with If-None-Match: * refuses a taken key.
	if err := put(key, "second", createOnly); minio.ToErrorResponse(err).Code != minio.PreconditionFailed {
		t.Fatalf("conditional put over a taken key: %v, want PreconditionFailed", err)
	}
	// So does CompleteMultipartUpload, and the upload survives it.
	id, err := r.core.NewMultipartUpload(ctx, b, key, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.core.PutObjectPart(ctx, b, key, id, 1, bytes.NewReader([]byte("third")), 5, minio.PutObjectPartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parts := []minio.CompletePart{{PartNumber: 1, ETag: p.ETag}}
	if _, err := r.core.CompleteMultipartUpload(ctx, b, key, id, parts, createOnly); minio.ToErrorResponse(err).Code != minio.PreconditionFailed {
		t.Fatalf("conditional complete over a taken key: %v, want PreconditionFailed", err)
	}
	if got := get(key); got != "first" {
		t.Fatalf("after refused writes: %q", got)
	}
	// Completing again a completed upload: 412 first (the condition is
	// checked before the upload id).
	fresh := r.prefix + "/fresh"
	id2, _ := r.core.NewMultipartUpload(ctx, b, fresh, minio.PutObjectOptions{})
	p2, _ := r.core.PutObjectPart(ctx, b, fresh, id2, 1, bytes.NewReader([]byte("x")), 1, minio.PutObjectPartOptions{})
	parts2 := []minio.CompletePart{{PartNumber: 1, ETag: p2.ETag}}
	if _, err := r.core.CompleteMultipartUpload(ctx, b, fresh, id2, parts2, createOnly); err != nil {
		t.Fatal(err)
	}
	_, err = r.core.CompleteMultipartUpload(ctx, b, fresh, id2, parts2, createOnly)
	if c := minio.ToErrorResponse(err).Code; c != minio.PreconditionFailed && c != minio.NoSuchUpload {
		t.Fatalf("second complete: %v", err)
	}
	// Uploads are listed for an exact key only, not a folder prefix.
	if ids, err := r.s3.Uploads(ctx, key); err != nil || len(ids) != 1 {
		t.Fatalf("uploads on exact key: %v, %v", ids, err)
	}
	if err := r.core.AbortMultipartUpload(ctx, b, key, id); err != nil {
		t.Fatal(err)
	}

	// PutObject with If-Match (node leases' compare-and-swap): refused for
	// another ETag, done for the current one.
	lease := r.prefix + "/lease"
	info, err := r.core.PutObject(ctx, b, lease, strings.NewReader("v1"), 2, "", "", createOnly)
	if err != nil {
		t.Fatal(err)
	}
	stale := minio.PutObjectOptions{}
	stale.SetMatchETag("00000000000000000000000000000000")
	if err := put(lease, "v2", stale); minio.ToErrorResponse(err).Code != minio.PreconditionFailed {
		t.Fatalf("put with If-Match of another ETag: %v, want PreconditionFailed", err)
	}
	current := minio.PutObjectOptions{}
	current.SetMatchETag(info.ETag)
	if err := put(lease, "v3", current); err != nil {
		t.Fatalf("put with If-Match of the current ETag: %v", err)
	}
	if err := put(lease, "v4", current); minio.ToErrorResponse(err).Code != minio.PreconditionFailed {
		t.Fatalf("put with If-Match of the replaced ETag: %v, want PreconditionFailed", err)
	}
	if got := get(lease); got != "v3" {
		t.Fatalf("lease after conditional puts: %q, want v3", got)
	}
	gone := minio.PutObjectOptions{}
	gone.SetMatchETag(info.ETag)
	if err := put(r.prefix+"/no-such-lease", "v5", gone); err == nil {
		t.Fatalf("put with If-Match on a missing key succeeded")
	} else {
		t.Logf("put with If-Match on a missing key: %s", minio.ToErrorResponse(err).Code)
	}

	// CopyObject ignores If-None-Match on MinIO and overwrites: the reason
	// Copy mode completes a multipart upload instead.
	if err := put(r.prefix+"/src", "copied", minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = r.core.CopyObject(ctx, b, r.prefix+"/src", b, key, map[string]string{"If-None-Match": "*"}, minio.CopySrcOptions{}, minio.PutObjectOptions{})
	if err == nil {
		t.Logf("MinIO CopyObject ignored If-None-Match: %q now holds %q", key, get(key))
	} else {
		t.Logf("MinIO CopyObject honoured If-None-Match (%v): Copy mode could use it", err)
	}
}

// TestLeftovers: the sweep's listing holds exactly this node's uploads and
// staging objects under the prefix, and removing them touches nothing
// else: not another node's, not other keys, not committed files.
func TestLeftovers(t *testing.T) {
	r := newRig(t, shared.Get(t), s3.Copy, 0)
	ctx := t.Context()
	committed := committertest.Prepare(t, r.env(), "clicks/dt=2026-11-29/hour=09/part-n1-00000000000000000001-0001.ndjson", []byte("kept\n"))
	if err := r.s3.Commit(ctx, committed); err != nil {
		t.Fatal(err)
	}
	f := committertest.Prepare(t, r.env(), finalName, []byte("{\"a\":1}\n"))
	start := func(key string) string {
		t.Helper()
		id, err := r.core.NewMultipartUpload(ctx, r.srv.Bucket, key, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	manifest := "_manifests/n1/00000000000000000001.json"
	mineManifest := start(r.s3.Key(manifest))
	otherNode := r.s3.Key("clicks/dt=2026-11-29/hour=09/part-n2-00000000000000000001-0000.ndjson")
	otherID := start(otherNode)
	otherManifest := start(r.s3.Key("_manifests/n2/00000000000000000001.json"))
	outside := start(r.prefix + "-other/clicks/dt=2026-11-29/hour=09/part-n1-00000000000000000001-0000.ndjson")
	notOurs := start(r.s3.Key("clicks/readme.txt"))
	rootPart := start(r.s3.Key("part-n1-00000000000000000001-0000.ndjson")) // no stream folder
	t.Cleanup(func() {
		for key, id := range map[string]string{otherNode: otherID, r.s3.Key("_manifests/n2/00000000000000000001.json"): otherManifest,
			r.prefix + "-other/clicks/dt=2026-11-29/hour=09/part-n1-00000000000000000001-0000.ndjson": outside,
			r.s3.Key("clicks/readme.txt"): notOurs, r.s3.Key("part-n1-00000000000000000001-0000.ndjson"): rootPart} {
			_ = r.core.AbortMultipartUpload(context.Background(), r.srv.Bucket, key, id)
		}
	})

	left, err := r.s3.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range left {
		got[l.Kind+" "+l.Key] = l.Name
		if l.Initiated.IsZero() || time.Since(l.Initiated) > time.Hour {
			t.Errorf("%s %s: initiated %v", l.Kind, l.Key, l.Initiated)
		}
	}
	want := map[string]string{
		"upload " + r.s3.Key(finalName):        finalName,
		"object " + r.s3.StagingKey(finalName): finalName,
		"upload " + r.s3.Key(manifest):         manifest,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("leftovers:\n%v\nwant:\n%v", got, want)
	}
	all, err := r.s3.LeftoversOf(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all["n1"]) != 3 || len(all["n2"]) != 2 || len(all) != 2 {
		t.Errorf("leftovers of every node: %v, want 3 of n1 and 2 of n2", all)
	}

	// Another node's upload is refused even when asked for.
	if err := r.s3.RemoveLeftover(ctx, committer.Leftover{Kind: committer.LeftoverUpload, Key: otherNode, UploadID: otherID}); err == nil {
		t.Error("removed another node's upload")
	}
	// A committed file is never a staging object.
	if err := r.s3.RemoveLeftover(ctx, committer.Leftover{Kind: committer.LeftoverObject, Key: r.s3.Key(committed.Final)}); err == nil {
		t.Error("removed a committed file as a staging object")
	}
	for _, l := range left {
		if err := r.s3.RemoveLeftover(ctx, l); err != nil {
			t.Fatalf("remove %+v: %v", l, err)
		}
		if err := r.s3.RemoveLeftover(ctx, l); !errors.Is(err, committer.ErrNotFound) {
			t.Errorf("remove %s %s again: %v, want ErrNotFound", l.Kind, l.Key, err)
		}
	}
	if left, err := r.s3.Leftovers(ctx); err != nil || len(left) != 0 {
		t.Fatalf("after removal: %v, %v", left, err)
	}
	if ids, err := r.s3.Uploads(ctx, otherNode); err != nil || len(ids) != 1 {
		t.Errorf("the other node's upload after the removal: %v, %v", ids, err)
	}
	committertest.WantContent(t, r.s3, committed.Final, []byte("kept\n"))
	committertest.WantAbsent(t, r.s3, f.Final)
	_ = mineManifest
}

// TestReuploadAbortsEarlierRetries: a commit whose upload the server
// dropped uploads again under a new id that no record holds; a crash during
// that leaves the new upload. The next Commit's retry removes it: nothing
// stays on the key once the file is committed.
func TestReuploadAbortsEarlierRetries(t *testing.T) {
	forEachMode(t, 0, func(t *testing.T, r *rig) {
		data := committertest.Content(61, 10_000)
		f := committertest.Prepare(t, r.env(), finalName, data)
		key := r.s3.Key(finalName)
		r.dropUpload(t, key, f.UploadID)
		// What a reupload cut off by a crash leaves on the keys.
		for _, k := range []string{key, r.s3.StagingKey(finalName)} {
			if _, err := r.core.NewMultipartUpload(t.Context(), r.srv.Bucket, k, minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		r.commitClean(t, f, finalName, data)
	})
}

// TestLeaseConformance: the S3 Leaser passes the suite (and the MinIO under
// test honours the conditions, or every write would be ErrUnsupported).
func TestLeaseConformance(t *testing.T) {
	srv := shared.Get(t)
	committertest.RunLeaser(t, func(t *testing.T) committer.Leaser {
		return newRig(t, srv, s3.Multipart, 0).s3
	})
}
