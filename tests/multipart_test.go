package tests

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// TestLargeTransactionMultipart commits one transaction of more than 64 MiB
// to MinIO and checks that it became one object of a multipart upload with
// several parts (its ETag ends in "-N", N > 1), complete and exactly once.
func TestLargeTransactionMultipart(t *testing.T) {
	if testing.Short() {
		t.Skip("70 MiB upload: not in -short mode")
	}
	ctx := t.Context()
	bucket := newS3Bucket(t, sharedMinIO(t), "big")
	p := newProc(t, workDir(t), procConfig{
		Args: append(bucket.destFlags(), "--s3-commit", "multipart", "--node", "e2e", "--checkpoint-interval", "0"),
		Env:  bucket.env(),
	})
	p.StartReady()
	prod := mustRawProducer(ctx, t, p.URL, "big")

	const (
		stream      = "bulk"
		recordSize  = 1024
		perBatch    = 4096 // 4 MiB per batch
		batches     = 18   // 72 MiB
		wantAtLeast = 64 << 20
	)
	want := map[batchKey]int{}
	pad := strings.Repeat("x", recordSize)
	began := time.Now()
	for q := range int64(batches) {
		k := batchKey{P: prod.ID(), S: stream, Q: q}
		recs := make([][]byte, perBatch)
		for i := range recs {
			b, _ := json.Marshal(record{P: k.P, S: k.S, Q: k.Q, I: i, N: perBatch})
			recs[i] = append(b[:len(b)-1], `,"x":"`+pad[:recordSize-len(b)-8]+`"}`...)
		}
		want[k] = perBatch
		a, err := prod.SendBody(ctx, stream, q, ndjson(recs), false)
		if err != nil || a.Status != http.StatusAccepted {
			t.Fatalf("send batch %d: %d %s %v", q, a.Status, a.Code, err)
		}
	}
	sent := time.Since(began)
	ck, err := p.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ck.State != "committed" || len(ck.Files) != 1 {
		t.Fatalf("checkpoint %d: %s with %d files (%s), want committed with 1 file", ck.ID, ck.State, len(ck.Files), ck.Error)
	}
	f := ck.Files[0]
	if f.Bytes < wantAtLeast {
		t.Fatalf("file %s: %d bytes, want at least %d", f.Path, f.Bytes, wantAtLeast)
	}
	info, err := bucket.c.StatObject(ctx, bucket.bucket, bucket.prefix+"/"+f.Path, minio.StatObjectOptions{})
	if err != nil {
		t.Fatalf("stat %s: %v", f.Path, err)
	}
	etag := strings.Trim(info.ETag, `"`)
	parts := 0
	if i := strings.LastIndexByte(etag, '-'); i >= 0 {
		parts, _ = strconv.Atoi(etag[i+1:])
	}
	if parts <= 1 {
		t.Errorf("object %s (%d bytes): ETag %q, want a multipart ETag ending in -N with N > 1", f.Path, info.Size, info.ETag)
	}
	if info.Size != f.Bytes {
		t.Errorf("object %s: %d bytes, checkpoint says %d", f.Path, info.Size, f.Bytes)
	}
	if code := p.Term(); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	rep := requireDest(t, bucket.dest(), want, true)
	requireVerify(t, bucket.env(), bucket.destFlags()...)
	report(t, "one transaction of %d bytes (%d records) sent in %s, committed in checkpoint %d as %s: ETag %s, %d parts; %d records verified exactly once",
		f.Bytes, f.Records, sent.Round(time.Millisecond), ck.ID, f.Path, info.ETag, parts, rep.Records)
}
