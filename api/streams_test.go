package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/internal/testing/tableplant"
	"github.com/eosink/eosink/server"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// TestStreamConfigAPI: PUT validates with the offending field, commits
// what the stream held, records a new version in force; GET answers config and
// counts; roles as other admin routes.
func TestStreamConfigAPI(t *testing.T) {
	r := newRig(t, rigOpts{api: withAuth})
	bad := []struct {
		body, field string
	}{
		{`{"format":"csv"}`, "format"},
		{`{"format":"parquet"}`, "schema"},
		{`{"compression":"snappy"}`, "compression"},
		{`{"partition":"dt={ingest:%Q}"}`, "partition"},
		{`{"format":"ndjson","schema":{"fields":[{"name":"a","type":"int64"},{"name":"b","type":"float"}]}}`, "schema.fields[1].type"},
		{`{"roll_size":"big"}`, "roll_size"},
		{`{"colour":"red"}`, "colour"},
		{`[]`, "body"},
	}
	for _, c := range bad {
		rec := r.admin("PUT", "/v1/streams/orders", c.body, "Content-Type", "application/json")
		expectStatus(t, rec, http.StatusBadRequest)
		e := decode[ErrorResponse](t, rec)
		if e.Error != "invalid_body" || e.Field != c.field {
			t.Errorf("PUT %s: %+v, want invalid_body field %q", c.body, e, c.field)
		}
	}
	if rec := r.do("PUT", "/v1/streams/orders", `{}`, "Content-Type", "application/json", "Authorization", "Bearer "+enginetest.TokRead); rec.Code != http.StatusForbidden {
		t.Fatalf("PUT with a read token: %d, want 403", rec.Code)
	}
	rec := r.do("GET", "/v1/streams/orders", "", "Authorization", "Bearer "+enginetest.TokRead)
	expectStatus(t, rec, http.StatusNotFound)

	// Accepted before the PUT: placed by the defaults (the ingest hour,
	// plain NDJSON), and committed by the PUT's barrier.
	ingest := []string{"Content-Type", "application/x-ndjson", "Authorization", "Bearer " + enginetest.TokIngest}
	expectStatus(t, r.do("POST", "/v1/streams/orders/records", `{"x":1}`+"\n", ingest...), http.StatusAccepted)
	body := `{"format":"ndjson","compression":"zstd","partition":"region={field:region}",
		"schema":{"fields":[{"name":"id","type":"int64","required":true},{"name":"region","type":"string","required":true}]}}`
	rec = r.admin("PUT", "/v1/streams/orders", body, "Content-Type", "application/json")
	expectStatus(t, rec, http.StatusOK)
	got := decode[StreamConfig](t, rec)
	if got.Version != 1 || got.ActiveVersion != 1 || got.Compression != "zstd" || got.Dedup != "none" {
		t.Fatalf("PUT answered %+v", got)
	}
	if d := decode[StreamDetail](t, r.admin("GET", "/v1/streams/orders", "")); d.ActiveVersion != 1 || d.Files != 1 || d.Records != 1 {
		t.Fatalf("after the PUT: %+v, want the batch before it committed", d)
	}

	// In force now: schema and partition refuse the whole batch, with the
	// line and the field.
	rec = r.do("POST", "/v1/streams/orders/records", `{"id":1,"region":"eu"}`+"\n"+`{"id":"two","region":"us"}`+"\n", ingest...)
	if e := expectError(t, rec, http.StatusBadRequest, "schema_mismatch"); e.Line != 2 || e.Field != "id" {
		t.Fatalf("schema: %+v", e)
	}
	rec = r.do("POST", "/v1/streams/orders/records", `{"id":1,"region":"eu"}`+"\n"+`{"id":2,"region":""}`+"\n", ingest...)
	if e := expectError(t, rec, http.StatusBadRequest, "invalid_partition"); e.Line != 2 || e.Field != "region" {
		t.Fatalf("partition: %+v", e)
	}
	rec = r.do("POST", "/v1/streams/orders/records", "plain line\n", "Content-Type", "text/plain", "Authorization", "Bearer "+enginetest.TokIngest)
	expectStatus(t, rec, http.StatusUnsupportedMediaType)

	// A batch spanning two partitions lands in both, compressed.
	rec = r.do("POST", "/v1/streams/orders/records", `{"id":1,"region":"eu"}`+"\n"+`{"id":2,"region":"us"}`+"\n"+`{"id":3,"region":"eu"}`+"\n", ingest...)
	expectStatus(t, rec, http.StatusAccepted)
	c := r.checkpoint()
	if len(c.Files) != 2 {
		t.Fatalf("files %+v, want one per region", c.Files)
	}
	want := map[string]string{"eu": `{"id":1,"region":"eu"}` + "\n" + `{"id":3,"region":"eu"}` + "\n", "us": `{"id":2,"region":"us"}` + "\n"}
	for _, f := range c.Files {
		region := strings.TrimPrefix(path.Dir(f.Path), "orders/region=")
		if !strings.HasSuffix(f.Path, ".ndjson.zst") {
			t.Errorf("%s: want .ndjson.zst", f.Path)
		}
		raw, err := readAll(r, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if staging.CRC32C(raw) != f.CRC32C || int64(len(raw)) != f.Bytes {
			t.Errorf("%s: manifest bytes/crc are not of the stored bytes", f.Path)
		}
		// The download serves the stored bytes, Content-Encoding untouched.
		dl := r.admin("GET", "/v1/files/"+f.Path, "")
		expectStatus(t, dl, http.StatusOK)
		if !bytes.Equal(dl.Body.Bytes(), raw) || dl.Header().Get("Content-Encoding") != "" || dl.Header().Get("Content-Type") != "application/zstd" {
			t.Errorf("download of %s: %d bytes (stored %d), Content-Encoding %q, Content-Type %q", f.Path, dl.Body.Len(), len(raw),
				dl.Header().Get("Content-Encoding"), dl.Header().Get("Content-Type"))
		}
		recs, err := format.Preview(bytes.NewReader(raw), int64(len(raw)), f.Path, 10, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, rec := range recs {
			got += string(rec) + "\n"
		}
		if got != want[region] {
			t.Errorf("%s holds %q, want %q", f.Path, got, want[region])
		}
	}
	d := decode[StreamDetail](t, r.admin("GET", "/v1/streams/orders", ""))
	if d.Files != 3 || d.Records != 4 || d.Version != 1 {
		t.Fatalf("GET: %+v", d)
	}

	// A second PUT is version 2; the store keeps it across a restart.
	expectStatus(t, r.admin("PUT", "/v1/streams/orders", `{"format":"ndjson","compression":"gzip"}`, "Content-Type", "application/json"), http.StatusOK)
	if d := decode[StreamDetail](t, r.admin("GET", "/v1/streams/orders", "")); d.Version != 2 || d.ActiveVersion != 2 {
		t.Fatalf("after the second PUT: %+v", d)
	}
}

func readAll(r *rig, p string) ([]byte, error) {
	return readFile(r.base, path.Join(enginetest.Dest, p))
}

func readFile(fsys interface {
	Open(string) (afero.File, error)
}, p string) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TestStreamDedupBody: a stream configured with "dedup": "body" keys a
// write without producer headers or Idempotency-Key by its decoded body:
// a retried batch is a duplicate (202 while open, 200 once committed),
// another body is not, and the window is per stream.
func TestStreamDedupBody(t *testing.T) {
	r := newRig(t, rigOpts{})
	expectStatus(t, r.admin("PUT", "/v1/streams/logs", `{"dedup":"body"}`, "Content-Type", "application/json"), http.StatusOK)
	r.checkpoint()
	nd := []string{"Content-Type", "application/x-ndjson"}
	post := func(stream, body string, want int, dup bool) {
		t.Helper()
		rec := r.do("POST", "/v1/streams/"+stream+"/records", body, nd...)
		expectStatus(t, rec, want)
		if got := decode[WriteResponse](t, rec); got.Duplicate != dup {
			t.Fatalf("POST %s %q: %+v, want duplicate %v", stream, body, got, dup)
		}
	}
	post("logs", `{"m":"a"}`+"\n", http.StatusAccepted, false)
	post("logs", `{"m":"a"}`+"\n", http.StatusAccepted, true) // a retry
	post("logs", `{"m":"b"}`+"\n", http.StatusAccepted, false)
	post("other", `{"m":"a"}`+"\n", http.StatusAccepted, false) // not configured: no dedup
	post("other", `{"m":"a"}`+"\n", http.StatusAccepted, false)
	c := r.checkpoint()
	var logs int64
	for _, f := range c.Files {
		if f.Stream == "logs" {
			logs += f.Records
		}
	}
	if logs != 2 {
		t.Fatalf("logs holds %d records, want 2", logs)
	}
	post("logs", `{"m":"a"}`+"\n", http.StatusOK, true) // committed duplicate
}

// TestStreamPutDuringOutage: a PUT's barrier waits for the commit of the
// stream's batches, which an outage holds back: the answer is bounded by
// --wait-timeout (503 not_ready, Retry-After) and nothing changed; once
// the outage is over the retried PUT is in force. Before, the PUT
// answered 200 at once, in force from a barrier that had not happened.
func TestStreamPutDuringOutage(t *testing.T) {
	var sc *committertest.Stuck
	r := newRig(t, rigOpts{
		engine: func(c *server.Config) { sc = &committertest.Stuck{Committer: c.Committer}; c.Committer = sc },
		api:    func(c *Config) { c.WaitTimeout = 300 * time.Millisecond },
	})
	write := func() {
		t.Helper()
		expectStatus(t, r.do("POST", "/v1/streams/orders/records", `{"x":1}`+"\n", "Content-Type", "application/x-ndjson"), http.StatusAccepted)
	}
	write()
	sc.On.Store(true)
	go func() { _, _ = r.eng.Checkpoint(context.Background()) }()
	for r.eng.Status().Stuck == "" {
		time.Sleep(time.Millisecond)
	}
	write()
	rec := r.admin("PUT", "/v1/streams/orders", `{"compression":"gzip"}`, "Content-Type", "application/json")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || decode[ErrorResponse](t, rec).Error != "not_ready" {
		t.Fatalf("PUT during the outage: %d %s, Retry-After %q; want 503 not_ready with Retry-After", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	if d := decode[StreamDetail](t, r.admin("GET", "/v1/streams/orders", "")); d.Version != 0 {
		t.Fatalf("after the PUT that timed out: %+v, want never configured", d)
	}
	sc.On.Store(false)
	// The stuck commit passes at its next retry, which may come after one
	// more --wait-timeout on a busy machine: retry the PUT as a client
	// told 503 not_ready does.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rec = r.admin("PUT", "/v1/streams/orders", `{"compression":"gzip"}`, "Content-Type", "application/json")
		if rec.Code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	expectStatus(t, rec, http.StatusOK)
	if got := decode[StreamConfig](t, rec); got.Version != 1 || got.ActiveVersion != 1 {
		t.Fatalf("PUT after the outage: %+v", got)
	}
}

// TestParkedTableAnswers: through the API, a table stream whose table
// commit fails for good (a version planted in its table that claims the
// table's uuid and does not parse) is parked: a write to it is answered
// 429 backpressure with Retry-After, a write to another table stream
// waiting for its commit (?wait=commit) 200, and /readyz 200. Once the
// planted version is gone, the parked stream's writes are accepted
// again. Failed before parking: the checkpoint holding both streams'
// files stayed stuck, so the wait=commit write timed out (503) and
// /readyz answered 503 (a permanent stuck commit).
func TestParkedTableAnswers(t *testing.T) {
	r := newRig(t, rigOpts{
		// RetryMax: the parked loop's pace, and so the 429's Retry-After.
		engine: func(c *server.Config) {
			c.TableLocation = "file://" + enginetest.Dest
			c.RetryMax = 2500 * time.Millisecond
		},
		api: func(c *Config) { c.WaitTimeout = 5 * time.Second },
	})
	conf := streamconf.Config{Format: streamconf.FormatParquet, Table: streamconf.TableIceberg,
		Partition: "k={field:k}", Schema: &streamconf.Schema{Fields: []streamconf.Field{{Name: "k", Type: streamconf.TypeString, Required: true}}}}
	for _, s := range []string{"ta", "tb"} {
		if _, err := r.eng.PutStream(context.Background(), s, conf); err != nil {
			t.Fatal(err)
		}
	}
	write := func(stream, query string) int {
		t.Helper()
		return r.do("POST", "/v1/streams/"+stream+"/records"+query, `{"k":"x"}`+"\n", "Content-Type", "application/x-ndjson").Code
	}
	for _, s := range []string{"ta", "tb"} {
		if c := write(s, ""); c != http.StatusAccepted {
			t.Fatalf("write to %s: %d", s, c)
		}
	}
	r.checkpoint()
	// Plant ta's v2: its v1 claiming a format version eosink can't read.
	b, err := afero.ReadFile(r.base, enginetest.Dest+"/"+layout.TableMetadataName("ta", 1))
	if err != nil {
		t.Fatal(err)
	}
	planted := enginetest.Dest + "/" + layout.TableMetadataName("ta", 2)
	if err := afero.WriteFile(r.base, planted, tableplant.Claiming(t, b), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ta", "tb"} {
		if c := write(s, ""); c != http.StatusAccepted {
			t.Fatalf("write to %s: %d", s, c)
		}
	}
	// The checkpoint holding both streams' files commits (within 5 s:
	// before parking it stayed stuck).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := r.eng.Checkpoint(ctx)
	cancel()
	if err != nil || res.State != "committed" {
		t.Fatalf("checkpoint with ta's table commit failing for good: %+v, %v (stuck %q)", res, err, r.eng.Status().Stuck)
	}
	rec := r.do("POST", "/v1/streams/ta/records", `{"k":"x"}`+"\n", "Content-Type", "application/x-ndjson")
	expectError(t, rec, http.StatusTooManyRequests, CodeBackpressure)
	if got := rec.Header().Get("Retry-After"); got != "3" {
		t.Fatalf("429 with Retry-After %q, want 3 (the parked loop's 2.5 s, rounded up; not sooner)", got)
	}
	waitCommit(t, r, "tb", "while ta is parked")
	expectStatus(t, r.do("GET", "/readyz", ""), http.StatusOK)
	if err := r.base.Remove(planted); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.eng.Status().TablesParked != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still parked: %s", r.eng.Status().TableParked)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitCommit(t, r, "ta", "once unparked")
}

// waitCommit writes a batch to stream with ?wait=commit, runs a
// checkpoint once it is in, and expects 200.
func waitCommit(t *testing.T, r *rig, stream, when string) {
	t.Helper()
	code := make(chan int, 1)
	go func() {
		code <- r.do("POST", "/v1/streams/"+stream+"/records?wait=commit", `{"k":"x"}`+"\n", "Content-Type", "application/x-ndjson").Code
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r.eng.Status().OpenRecords == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the write never reached the engine")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _, _ = r.eng.Checkpoint(ctx) }()
	if c := <-code; c != http.StatusOK {
		t.Fatalf("write to %s with wait=commit %s: %d, want 200", stream, when, c)
	}
}
