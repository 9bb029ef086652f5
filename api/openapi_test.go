package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// openAPIRouter loads openapi.yaml once, checks it is a valid OpenAPI
// document, and returns a router over it.
var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	// Bodies the document declares that kin-openapi has no decoder for.
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/ndjson", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/gzip", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/zstd", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/vnd.apache.parquet", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("multipart/byteranges", openapi3filter.PlainBodyDecoder)
	doc, err := openapi3.NewLoader().LoadFromData(openAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	doc.Servers = nil // match any host
	return legacy.NewRouter(doc)
})

// checkOpenAPI validates one answer, and the request of a successful one,
// against openapi.yaml with kin-openapi's openapi3filter: every status,
// header the document requires, content type and body. A request on no
// documented path is not checked (404 not_found of an unknown route).
// body is the request body, nil if it cannot be replayed (then it is not
// checked).
func checkOpenAPI(t *testing.T, req *http.Request, body []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	router, err := openAPIRouter()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	route, params, err := router.FindRoute(req)
	for _, prefix := range []string{"/v1/files/", "/ui/"} {
		if err == nil || !strings.HasPrefix(req.URL.Path, prefix) {
			continue
		}
		// {path} holds slashes, or is empty, which a path template cannot
		// match: route on a stand-in.
		alt := req.Clone(req.Context())
		alt.URL = &url.URL{Path: prefix + "x", RawQuery: req.URL.RawQuery}
		route, params, err = router.FindRoute(alt)
		if err == nil {
			params["path"] = strings.TrimPrefix(req.URL.Path, prefix)
		}
	}
	if err == nil && req.URL.Path == "/ui/" {
		params["path"] = "x" // the UI's home page: path params may not be empty
	}
	if err != nil {
		// A method or path the document cannot name (405 for a method the
		// path does not serve, 404, a 400 for an escaped slash): the
		// answer is still the JSON error, and a 405 names what is allowed.
		checkUnroutedAnswer(t, req, rec)
		return
	}
	ctx := context.Background()
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc, // auth_test.go checks roles
		IncludeResponseStatus: true,
		ExcludeRequestBody:    body == nil,
		MultiError:            true,
	}
	in := &openapi3filter.RequestValidationInput{Request: req.Clone(ctx), PathParams: params, Route: route, Options: opts}
	if body != nil {
		in.Request.Body = io.NopCloser(bytes.NewReader(body))
	}
	if rec.Code < 300 {
		// The document must admit every request the server serves.
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			t.Errorf("openapi: request %s %s (answered %d) does not match: %v", req.Method, req.URL, rec.Code, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 rec.Code,
		Header:                 rec.Header(),
		Body:                   io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
		Options:                opts,
	}
	if req.Method == http.MethodHead || rec.Code == http.StatusNotModified {
		out.Options = &openapi3filter.Options{AuthenticationFunc: opts.AuthenticationFunc, IncludeResponseStatus: true, ExcludeResponseBody: true}
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("openapi: answer %d %s to %s %s does not match: %v\nbody: %.300s", rec.Code, rec.Header().Get("Content-Type"), req.Method, req.URL, err, rec.Body.String())
	}
}

// checkUnroutedAnswer checks an answer to a request on no documented
// operation against components/schemas/Error and, for a 405,
// components/responses/MethodNotAllowed's Allow header.
func checkUnroutedAnswer(t *testing.T, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openAPI)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Code < 400 {
		t.Errorf("openapi: %s %s answered %d but is not documented", req.Method, req.URL, rec.Code)
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("openapi: %d to undocumented %s %s: Content-Type %q, want the JSON error", rec.Code, req.Method, req.URL, ct)
		return
	}
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Errorf("openapi: %d to undocumented %s %s: %v", rec.Code, req.Method, req.URL, err)
		return
	}
	if err := doc.Components.Schemas["Error"].Value.VisitJSON(v); err != nil {
		t.Errorf("openapi: %d to undocumented %s %s: body does not match Error: %v", rec.Code, req.Method, req.URL, err)
	}
	if rec.Code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
		t.Errorf("openapi: 405 to %s %s without Allow", req.Method, req.URL)
	}
}

// TestOpenAPIDocumentValid loads the document with kin-openapi. Every
// request the api tests send through the rig (rig.serve) is checked
// against it with checkOpenAPI: the error tables, the successes, the
// pagination, the downloads.
func TestOpenAPIDocumentValid(t *testing.T) {
	if _, err := openAPIRouter(); err != nil {
		t.Fatal(err)
	}
}

// TestErrorCodes: the const block is the OpenAPI document's enum of error
// codes, each once, in its order.
func TestErrorCodes(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(openAPI)
	if err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.Enum {
		enum = append(enum, v.(string))
	}
	if !slices.Equal(enum, ErrorCodes) {
		t.Fatalf("error codes:\n openapi.yaml %v\n codes.go     %v", enum, ErrorCodes)
	}
	seen := map[string]bool{}
	for _, c := range ErrorCodes {
		if seen[c] {
			t.Errorf("code %s listed twice", c)
		}
		seen[c] = true
	}
}
