// Package api serves eosink's HTTP API v1 (docs/design.md, "HTTP API v1
// (binding)") over an Engine: the route table, the wire types, the mapping
// of engine errors to statuses and error codes, bearer-token authorization,
// and the OpenAPI document (openapi.yaml, served at GET /v1/openapi.yaml).
//
// The package owns no state of its own; it reads the Engine (writes,
// producers, status, and its read-only checkpoint queries) and the read
// model of committed files, internal/catalog (shared with the UI). [Server.Handler] returns the router;
// [New] checks the Config and fills in defaults.
//
// # Writes
//
// POST /v1/streams/{stream}/records checks, in this order: the stream name,
// the idempotence headers, ?wait, the Content-Type (415 before the body is
// read), the body size (Content-Length, then http.MaxBytesReader), the body
// (batch.Parse), and only then calls Engine.Write, so a refused batch never
// reaches the engine. Every answer of this route, errors and 401/403
// included, carries X-Eosink-Checkpoint: the checkpoint holding the batch on
// success, the open checkpoint otherwise.
//
// With ?wait=commit the handler waits, at most Config.WaitTimeout, for the
// batch's checkpoint to end: committed is 200 with "committed": true; a
// timeout is not an error but the ordinary 202 (the batch stays accepted);
// an aborted checkpoint is 503 "aborted", with "expected_seq" when the batch
// came from a producer, so the client resends from there.
//
// # Listings
//
// GET /v1/files and GET /v1/streams list the destination (committed files
// only: eosink never puts temp files there), every node's, a page at a
// time through the catalog. Record counts come from the manifests: a data
// file's name, part-<node>-<checkpoint>-<index>.<ext>, names its manifest
// _manifests/<node>/<checkpoint>.json, read once into the catalog's cache
// (bounded by bytes; a missing manifest is not cached, since a file is
// renamed into place a moment before its manifest is published). A file
// whose manifest is missing or unreadable has no "records" in /v1/files
// and adds nothing to its stream's records in /v1/streams. ?node= keeps
// one node's files.
//
// # The commit feed
//
// GET /v1/commits (commits.go) pages catalog.Commits: every node's
// committed checkpoints, each once along a chain of cursors
// (catalog.ParseCursor; a bad one is 400 invalid_cursor). With ?wait= an
// empty page waits in catalog.WaitCommits, woken by this node's commits
// (the engine's hook calls Catalog.Notify) or the shared poll of the other
// nodes, and at least 100 ms apart; Server.EndWaits, called when the HTTP
// server shuts down, answers every wait at once. GET
// /v1/producers/{p}/streams/{s}/seqs/{n} (seqs.go) asks catalog.LocateSeq
// which committed file holds a producer's batch.
//
// # Downloads
//
// GET /v1/files/{path} serves one committed file with http.ServeContent
// (Range, If-Modified-Since). The path is checked before the Reader sees it:
// every segment must be non-empty, not "." or "..", and hold no '/' once
// unescaped (no %2F), no '\\', no NUL or other control byte; the whole must
// pass fs.ValidPath. Anything else is 400 invalid_path.
//
// # Authorization
//
// With Config.Auth nil every route is open (the command serves only
// loopback addresses then). Otherwise a request carries a bearer token in
// Authorization or, for GET only, in the cookie "eosink_token" set by the
// web UI. Roles:
//
//	ingest  POST records, POST producers/{p}/init, GET producers
//	read    every GET
//	admin   everything (POST /v1/checkpoints needs it)
//
// The token file (auth.LoadTokens) holds one "<role> <token>" per line; blank
// lines and '#' comments are skipped; a token may appear once.
//
// /healthz and /readyz are open. A missing or unknown token is 401
// unauthorized with WWW-Authenticate: Bearer; a known token without the
// role is 403 forbidden. Tokens are compared by SHA-256 digest in constant
// time against every known token.
package api
