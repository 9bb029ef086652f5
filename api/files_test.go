package api

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// filled returns a rig holding committed files in two checkpoints:
// clicks (ndjson, 3 + 2 records) and logs (txt, 2 records).
func filled(t *testing.T, o rigOpts) *rig {
	t.Helper()
	r := newRig(t, o)
	post := func(stream, ct, body string) {
		expectStatus(t, r.admin("POST", "/v1/streams/"+stream+"/records", body, "Content-Type", ct), http.StatusAccepted)
	}
	post("clicks", "application/x-ndjson", "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n")
	post("logs", "text/plain", "line one\nline two\n")
	r.checkpoint()
	post("clicks", "application/x-ndjson", "{\"n\":4}\n{\"n\":5}\n")
	r.checkpoint()
	return r
}

func TestListFilesAndStreams(t *testing.T) {
	r := filled(t, rigOpts{})
	fl := getOK[FileList](r, "/v1/files?prefix=clicks/")
	if len(fl.Files) != 2 {
		t.Fatalf("files %+v", fl)
	}
	for i, f := range fl.Files {
		if !strings.HasPrefix(f.Path, "clicks/dt=") || f.Records == nil || f.Checkpoint == nil || f.Modified.IsZero() {
			t.Fatalf("file %+v", f)
		}
		want := []int64{3, 2}[i]
		if *f.Records != want || f.Bytes != want*8 {
			t.Errorf("%s: records %d bytes %d, want %d", f.Path, *f.Records, f.Bytes, want)
		}
		if _, id, _, _, ok := layout.ParsePartName(path.Base(f.Path)); !ok || id != *f.Checkpoint || f.Node != enginetest.Node {
			t.Errorf("%s: checkpoint %d", f.Path, *f.Checkpoint)
		}
	}
	if *fl.Files[0].Checkpoint >= *fl.Files[1].Checkpoint {
		t.Errorf("checkpoints %d, %d", *fl.Files[0].Checkpoint, *fl.Files[1].Checkpoint)
	}

	// No prefix: data files only; a "_" prefix: manifests.
	all := decode[FileList](t, r.do("GET", "/v1/files", ""))
	if len(all.Files) != 3 {
		t.Fatalf("all files %+v", all)
	}
	man := decode[FileList](t, r.do("GET", "/v1/files?prefix=_manifests/", ""))
	if len(man.Files) != 2 || man.Files[0].Checkpoint == nil || man.Files[0].Records != nil {
		t.Fatalf("manifests %+v", man)
	}

	sl := getOK[StreamList](r, "/v1/streams")
	want := []Stream{{Name: "clicks", Files: 2, Records: 5, Bytes: 40}, {Name: "logs", Files: 1, Records: 2, Bytes: 18}}
	if len(sl.Streams) != 2 || sl.Streams[0] != want[0] || sl.Streams[1] != want[1] {
		t.Fatalf("streams %+v, want %+v", sl.Streams, want)
	}

	// A file whose manifest is not there (yet) has no record count.
	r.Broken("removes a manifest")
	if err := r.base.Remove(enginetest.Dest + "/" + layout.ManifestName(enginetest.Node, *fl.Files[1].Checkpoint)); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(catalog.Config{Files: r.srv.files, State: r.srv.eng}) // empty cache
	if err != nil {
		t.Fatal(err)
	}
	r2 := &Server{eng: r.srv.eng, cat: cat, files: r.srv.files, auth: r.srv.auth,
		metrics: r.srv.metrics, log: r.srv.log, maxBody: r.srv.maxBody, maxRecord: r.srv.maxRecord, wait: r.srv.wait,
		retryAfter: r.srv.retryAfter}
	r2.handler = r2.routes()
	rec := r.serveWith(r2, "GET", "/v1/files?prefix=clicks/")
	fl = decode[FileList](t, rec)
	if fl.Files[0].Records == nil || fl.Files[1].Records != nil {
		t.Fatalf("records %v %v", fl.Files[0].Records, fl.Files[1].Records)
	}

	for _, bad := range []string{"../", "..", "/data", "clicks/../..", "a//b", `a\b`, "a/./b", "a\x00b", "a\x01"} {
		rec := r.do("GET", "/v1/files?prefix="+url.QueryEscape(bad), "")
		expectStatus(t, rec, http.StatusBadRequest)
		if strings.Contains(rec.Body.String(), enginetest.Secret) {
			t.Fatalf("prefix %q: %s", bad, rec.Body.String())
		}
	}
}

func (r *rig) serveWith(s *Server, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, request(method, target, ""))
	return rec
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

func TestDownload(t *testing.T) {
	r := filled(t, rigOpts{})
	fl := decode[FileList](t, r.do("GET", "/v1/files", ""))
	for _, f := range fl.Files {
		rec := r.do("GET", "/v1/files/"+f.Path, "")
		expectStatus(t, rec, http.StatusOK)
		want, err := afero.ReadFile(r.base, enginetest.Dest+"/"+f.Path)
		if err != nil || rec.Body.String() != string(want) {
			t.Fatalf("%s: %q, want %q (%v)", f.Path, rec.Body.String(), want, err)
		}
		wantCT := "application/x-ndjson"
		if strings.HasSuffix(f.Path, ".txt") {
			wantCT = "text/plain; charset=utf-8"
		}
		if ct := rec.Header().Get("Content-Type"); ct != wantCT {
			t.Errorf("%s: Content-Type %q", f.Path, ct)
		}
	}
	man := decode[FileList](t, r.do("GET", "/v1/files?prefix=_manifests/", ""))
	rec := r.do("GET", "/v1/files/"+man.Files[0].Path, "")
	expectStatus(t, rec, http.StatusOK)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("manifest Content-Type %q", ct)
	}

	// Range.
	p := fl.Files[0].Path // {"n":1}\n{"n":2}\n{"n":3}\n
	rec = r.do("GET", "/v1/files/"+p, "", "Range", "bytes=8-15")
	expectStatus(t, rec, http.StatusPartialContent)
	if rec.Body.String() != "{\"n\":2}\n" || rec.Header().Get("Content-Range") != "bytes 8-15/24" {
		t.Fatalf("range: %q %q", rec.Body.String(), rec.Header().Get("Content-Range"))
	}
	rec = r.do("GET", "/v1/files/"+p, "", "Range", "bytes=-4")
	expectStatus(t, rec, http.StatusPartialContent)
	if rec.Body.String() != ":3}\n" {
		t.Fatalf("suffix range: %q", rec.Body.String())
	}
	rec416 := r.do("GET", "/v1/files/"+p, "", "Range", "bytes=100-")
	expectStatus(t, rec416, http.StatusRequestedRangeNotSatisfiable)
	if e := decode[ErrorResponse](t, rec416); e.Error != "range_not_satisfiable" || !strings.HasPrefix(rec416.Header().Get("Content-Range"), "bytes */") {
		t.Errorf("416: %+v %v", e, rec416.Header())
	}

	rec = r.do("GET", "/v1/files/clicks/nope.ndjson", "")
	expectError(t, rec, http.StatusNotFound, "not_found")
	// A directory is not a file.
	expectStatus(t, r.do("GET", "/v1/files/clicks", ""), http.StatusNotFound)
}

// TestDownloadTraversal tries to read outside the destination.
func TestDownloadTraversal(t *testing.T) {
	r := filled(t, rigOpts{})
	// Secrets live at /secret.txt, /data/secret.txt, /data/staging-secret.txt
	// and /data/files-secret.txt; the destination is /data/files.
	targets := []string{
		"/v1/files/../secret.txt",
		"/v1/files/../../secret.txt",
		"/v1/files/clicks/../../secret.txt",
		"/v1/files/%2e%2e/secret.txt",
		"/v1/files/%2E%2E/%2E%2E/secret.txt",
		"/v1/files/clicks/%2e%2e/%2e%2e/secret.txt",
		"/v1/files/..%2Fsecret.txt",
		"/v1/files/..%2fsecret.txt",
		"/v1/files/%2e%2e%2fsecret.txt",
		"/v1/files/%2Fdata%2Fsecret.txt",
		"/v1/files/%2Fsecret.txt",
		"/v1/files//data/secret.txt",
		"/v1/files//secret.txt",
		"/v1/files/clicks//../../secret.txt",
		`/v1/files/..\secret.txt`,
		"/v1/files/..%5Csecret.txt",
		"/v1/files/..%5c..%5csecret.txt",
		"/v1/files/.",
		"/v1/files/./../secret.txt",
		"/v1/files/%2e/%2e%2e/secret.txt",
		"/v1/files/",
		"/v1/files/secret.txt%00",
		"/v1/files/..%00/secret.txt",
		"/v1/files/%252e%252e/secret.txt",
		"/v1/files/..;/secret.txt",
		"/v1/files/../files-secret.txt",
		"/v1/files/../staging-secret.txt",
		"/v1/files/..%2F..%2Fsecret.txt",
		"/v1/files/%c0%ae%c0%ae/secret.txt",
		"/v1/files/./secret.txt",
	}
	// Names that are clean but do not exist are 404; everything else 400.
	notFound := map[string]bool{"/v1/files/%252e%252e/secret.txt": true, "/v1/files/..;/secret.txt": true}
	check := func(target string, code int, body string) {
		t.Helper()
		want := http.StatusBadRequest
		if notFound[target] {
			want = http.StatusNotFound
		}
		if code != want || strings.Contains(body, enginetest.Secret) {
			t.Errorf("%s: %d %q, want %d", target, code, body, want)
		}
	}
	for _, target := range targets {
		rec := r.do("GET", target, "")
		check(target, rec.Code, rec.Body.String())
	}
	// The same through a real server and a raw connection, so nothing
	// between the wire and the handler cleans the path first.
	ts := httptest.NewServer(r.srv)
	defer ts.Close()
	for _, target := range targets {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = conn.Close()
		check(target, resp.StatusCode, string(body))
	}
	// The checks do not refuse ordinary names.
	fl := decode[FileList](t, r.do("GET", "/v1/files", ""))
	p := fl.Files[0].Path
	expectStatus(t, r.do("GET", "/v1/files/"+strings.ReplaceAll(p, "=", "%3D"), ""), http.StatusOK)
}

func TestCheckpointRoutes(t *testing.T) {
	r := newRig(t, rigOpts{})
	expectStatus(t, r.do("POST", "/v1/streams/s/records", "{}\n{}\n", "Content-Type", "application/x-ndjson"), http.StatusAccepted)
	st := r.eng.Status()
	rec := r.do("GET", "/v1/checkpoints/"+u64(st.OpenID), "")
	expectStatus(t, rec, http.StatusOK)
	if c := decode[Checkpoint](t, rec); c.State != StateOpen || c.Records != 2 || c.FileCount != 1 {
		t.Fatalf("open checkpoint %+v", c)
	}
	c := r.checkpoint()
	if len(c.Files) != 1 || c.Files[0].Records != 2 || c.Files[0].Stream != "s" || c.Files[0].Bytes != 6 || c.DurationMS < 0 {
		t.Fatalf("checkpoint %+v", c)
	}
	e := r.checkpoint() // empty
	if e.ID != c.ID+1 || len(e.Files) != 0 {
		t.Fatalf("empty checkpoint %+v", e)
	}

	rec = r.do("GET", "/v1/checkpoints/"+u64(c.ID), "")
	expectStatus(t, rec, http.StatusOK)
	got := decode[Checkpoint](t, rec)
	if got.ID != c.ID || got.State != "committed" || len(got.Files) != 1 || got.Files[0] != c.Files[0] ||
		got.StartedAt.IsZero() || got.CommittedAt.IsZero() || got.Records != 2 || got.Bytes != 6 {
		t.Fatalf("get %+v, posted %+v", got, c)
	}
	if !strings.Contains(rec.Body.String(), `"files":[`) {
		t.Fatalf("no files: %s", rec.Body.String())
	}

	rec = r.do("GET", "/v1/checkpoints", "")
	expectStatus(t, rec, http.StatusOK)
	cl := decode[CheckpointList](t, rec)
	// The empty checkpoint wrote nothing, so it is not listed.
	if len(cl.Checkpoints) != 1 || cl.Checkpoints[0].ID != c.ID || cl.Checkpoints[0].FileCount != 1 {
		t.Fatalf("list %+v", cl)
	}
	if strings.Contains(rec.Body.String(), `"files"`) {
		t.Fatalf("list holds files: %s", rec.Body.String())
	}
	if cl := decode[CheckpointList](t, r.do("GET", "/v1/checkpoints?limit=1", "")); len(cl.Checkpoints) != 1 || cl.Checkpoints[0].ID != c.ID {
		t.Fatalf("limit=1 %+v", cl)
	}
	expectStatus(t, r.do("GET", "/v1/checkpoints?limit=10000", ""), http.StatusOK) // the most; more is invalid_limit (TestListLimits)

	for _, tc := range []struct {
		target string
		status int
		code   string
	}{
		{"/v1/checkpoints/abc", 400, "invalid_id"},
		{"/v1/checkpoints/-1", 400, "invalid_id"},
		{"/v1/checkpoints/1.5", 400, "invalid_id"},
		{"/v1/checkpoints/99999", 404, "not_found"},
		{"/v1/checkpoints/0", 404, "not_found"},
		{"/v1/checkpoints?limit=0", 400, "invalid_limit"},
		{"/v1/checkpoints?limit=x", 400, "invalid_limit"},
	} {
		expectError(t, r.do("GET", tc.target, ""), tc.status, tc.code)
	}
}

func TestProducerRoutes(t *testing.T) {
	r := newRig(t, rigOpts{})
	rec := r.do("POST", "/v1/producers/app-1:x/init", "")
	expectStatus(t, rec, http.StatusOK)
	p := decode[Producer](t, rec)
	if p.Producer != "app-1:x" || p.Epoch != 0 || p.Streams == nil || len(p.Streams) != 0 {
		t.Fatalf("init %+v", p)
	}
	if !strings.Contains(rec.Body.String(), `"streams":{}`) {
		t.Fatalf("streams not an object: %s", rec.Body.String())
	}
	if e := r.initProducer("app-1:x"); e != 1 {
		t.Fatalf("epoch %d", e)
	}
	expectStatus(t, r.do("POST", "/v1/streams/s/records", "{}", "Content-Type", "application/x-ndjson",
		"Producer-Id", "app-1:x", "Producer-Epoch", "1", "Producer-Seq", "0"), http.StatusAccepted)
	got := decode[Producer](t, r.do("GET", "/v1/producers/app-1:x", ""))
	if got.Epoch != 1 || got.Streams["s"] != (StreamSeq{NextSeq: 1, CommittedSeq: -1}) {
		t.Fatalf("get %+v", got)
	}
	r.checkpoint()
	got = decode[Producer](t, r.do("GET", "/v1/producers/app-1%3Ax", ""))
	if got.Streams["s"] != (StreamSeq{NextSeq: 1, CommittedSeq: 0}) {
		t.Fatalf("get after commit %+v", got)
	}
	r.initProducer("b")
	pl := decode[ProducerList](t, r.do("GET", "/v1/producers", ""))
	if len(pl.Producers) != 2 || pl.Producers[0].Producer != "app-1:x" || pl.Producers[1].Producer != "b" {
		t.Fatalf("list %+v", pl)
	}
	rec = r.do("GET", "/v1/producers/ghost", "")
	expectError(t, rec, http.StatusNotFound, "not_found")
	for _, target := range []string{"/v1/producers/-x/init", "/v1/producers/a%2Fb/init", "/v1/producers/" + strings.Repeat("a", 129) + "/init"} {
		expectError(t, r.do("POST", target, ""), http.StatusBadRequest, "invalid_producer")
	}
}

func TestProbesAndMisc(t *testing.T) {
	r := newRig(t, rigOpts{})
	rec := r.do("GET", "/healthz", "")
	expectStatus(t, rec, http.StatusOK)
	rec = r.do("GET", "/readyz", "")
	expectStatus(t, rec, http.StatusOK)
	if s := decode[Status](t, rec); s.Status != "ready" {
		t.Fatalf("%+v", s)
	}
	rec = r.do("GET", "/", "")
	expectStatus(t, rec, http.StatusOK)
	if !strings.Contains(rec.Body.String(), `href="/v1/streams"`) {
		t.Fatalf("index %q", rec.Body.String())
	}
	rec = r.do("GET", "/v1/openapi.yaml", "")
	expectStatus(t, rec, http.StatusOK)
	if !strings.HasPrefix(rec.Body.String(), "openapi: 3.1") {
		t.Fatalf("openapi %q", rec.Body.String()[:40])
	}
	rec = r.do("GET", "/metrics", "")
	expectStatus(t, rec, http.StatusOK)
	rec = r.do("GET", "/v2/nothing", "")
	expectError(t, rec, http.StatusNotFound, "not_found")
	rec = r.do("DELETE", "/v1/streams", "")
	expectError(t, rec, http.StatusMethodNotAllowed, "method_not_allowed")
}

// TestListFilesTwoNodes: /v1/files covers every node's files, with each
// one's records from its own node's manifest, and ?node= keeps one node's.
func TestListFilesTwoNodes(t *testing.T) {
	r := filled(t, rigOpts{})
	other := "clicks/dt=2026-11-29/hour=09/" + layout.PartName("n2", 7, 0, "ndjson")
	data := []byte("{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n")
	m, err := recovery.BuildManifest("n2", &recovery.Checkpoint{ID: 7, Files: []committer.File{
		{Stream: "clicks", Final: other, Bytes: int64(len(data)), Records: 4, CRC32C: fmt.Sprintf("%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{other: data, layout.ManifestName("n2", 7): m} {
		if err := r.base.MkdirAll(path.Dir(enginetest.Dest+"/"+name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := afero.WriteFile(r.base, enginetest.Dest+"/"+name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all := decode[FileList](t, r.do("GET", "/v1/files?prefix=clicks/", ""))
	nodes := map[string]int{}
	for _, f := range all.Files {
		nodes[f.Node]++
		if f.Path == other && (f.Records == nil || *f.Records != 4 || *f.Checkpoint != 7) {
			t.Errorf("n2's file: %+v", f)
		}
	}
	if len(all.Files) != 3 || nodes[enginetest.Node] != 2 || nodes["n2"] != 1 {
		t.Fatalf("files of every node: %+v", all.Files)
	}
	only := decode[FileList](t, r.do("GET", "/v1/files?node=n2", ""))
	if len(only.Files) != 1 || only.Files[0].Path != other {
		t.Fatalf("n2's files: %+v", only.Files)
	}
	man := decode[FileList](t, r.do("GET", "/v1/files?prefix=_manifests/&node=n2", ""))
	if len(man.Files) != 1 || man.Files[0].Node != "n2" || *man.Files[0].Checkpoint != 7 {
		t.Fatalf("n2's manifests: %+v", man.Files)
	}
	st := decode[StreamList](t, r.do("GET", "/v1/streams", ""))
	if st.Streams[0].Name != "clicks" || st.Streams[0].Files != 3 || st.Streams[0].Records != 5+4 {
		t.Fatalf("streams: %+v", st.Streams)
	}
	expectStatus(t, r.do("GET", "/v1/files?node=a/b", ""), http.StatusBadRequest)
}

// TestMultiRange: a Range of several ranges is answered with the ranges
// coalesced (overlapping or nearly adjacent ones become one), so an answer
// never holds a byte twice; more than maxRanges separate ranges are 416
// range_not_satisfiable. (Overlapping ranges were each served, as long as
// their sum was within the file's size: 13 copies of one range sent it 13
// times, with a part's headers each, and read it 13 times from S3.)
func TestMultiRange(t *testing.T) {
	r := newRig(t, rigOpts{})
	var body strings.Builder
	for i := range 200 {
		fmt.Fprintf(&body, "{\"n\":1%07d}\n", i) // 15 bytes a line, 3000 bytes
	}
	expectStatus(t, r.do("POST", "/v1/streams/s/records", body.String(), "Content-Type", "application/x-ndjson"), http.StatusAccepted)
	r.checkpoint()
	fl := decode[FileList](t, r.do("GET", "/v1/files?prefix=s/", ""))
	if len(fl.Files) != 1 {
		t.Fatalf("files %+v", fl.Files)
	}
	url := "/v1/files/" + fl.Files[0].Path
	file := body.String()

	// Overlapping and repeated ranges: one part, each byte once.
	rec := r.do("GET", url, "", "Range", "bytes=100-299,"+strings.TrimSuffix(strings.Repeat("0-199,", 13), ","))
	expectStatus(t, rec, http.StatusPartialContent)
	if got := rec.Header().Get("Content-Range"); got != "bytes 0-299/3000" || rec.Body.String() != file[:300] {
		t.Fatalf("overlapping ranges: Content-Range %q, %d bytes", got, rec.Body.Len())
	}
	// Ranges a few bytes apart become one too (a part's headers cost more).
	rec = r.do("GET", url, "", "Range", "bytes=10-19,30-39,-5")
	expectStatus(t, rec, http.StatusPartialContent)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "multipart/byteranges") {
		t.Fatalf("two separate ranges: Content-Type %q", ct)
	}
	if n := strings.Count(rec.Body.String(), "Content-Range: "); n != 2 {
		t.Fatalf("10-19,30-39,-5: %d parts, want 2 (10-39 and 2995-2999):\n%s", n, rec.Body.String())
	}
	for _, want := range []string{"Content-Range: bytes 10-39/3000", "Content-Range: bytes 2995-2999/3000", file[10:40], file[2995:]} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Fatalf("multipart answer lacks %q:\n%s", want, rec.Body.String())
		}
	}
	// Many separate ranges: refused.
	var many []string
	for i := range maxRanges + 1 {
		many = append(many, fmt.Sprintf("%d-%d", i*150, i*150))
	}
	rec = r.do("GET", url, "", "Range", "bytes="+strings.Join(many, ","))
	if e := expectError(t, rec, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable"); rec.Header().Get("Content-Range") != "bytes */3000" {
		t.Fatalf("too many ranges: %+v %v", e, rec.Header())
	}
	// As many as allowed are served.
	rec = r.do("GET", url, "", "Range", "bytes="+strings.Join(many[:maxRanges], ","))
	expectStatus(t, rec, http.StatusPartialContent)
	if n := strings.Count(rec.Body.String(), "Content-Range: "); n != maxRanges {
		t.Fatalf("%d ranges: %d parts", maxRanges, n)
	}
	// A range outside the file among others is skipped, as net/http does;
	// all outside is 416.
	rec = r.do("GET", url, "", "Range", "bytes=5000-6000,0-9")
	expectStatus(t, rec, http.StatusPartialContent)
	if rec.Body.String() != file[:10] {
		t.Fatalf("one range outside: %q", rec.Body.String())
	}
	expectStatus(t, r.do("GET", url, "", "Range", "bytes=5000-6000,7000-"), http.StatusRequestedRangeNotSatisfiable)
	// What does not parse is refused by net/http, as a single range is.
	expectStatus(t, r.do("GET", url, "", "Range", "bytes=x-1,0-9"), http.StatusRequestedRangeNotSatisfiable)
}
