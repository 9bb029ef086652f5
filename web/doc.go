// Package web serves eosink's web UI: what was committed, browsed like a
// file manager, and the state of checkpoints and producers. It is server
// side HTML from html/template; templates, the stylesheet and a little
// plain JavaScript are embedded with embed, so the binary needs no build
// step and no asset on disk. Every page works without JavaScript.
//
// [New] returns one http.Handler for GET / (a redirect to /ui/) and
// everything under /ui/:
//
//	GET  /ui/                      overview: recent streams, ingest rate, open checkpoint, recent checkpoints
//	GET  /ui/streams?after=        every stream by name, 100 a page
//	GET  /ui/files/{path}/         a folder of the destination by name: ?q= name prefix, ?after= cursor
//	GET  /ui/files/{path}          a file: details, manifest entry, preview, download link
//	GET  /ui/checkpoints?before=   checkpoints, newest first, 100 a page, with SVG charts of duration and bytes
//	GET  /ui/checkpoints/{id}      one checkpoint and its files, 200 a page (?from=)
//	GET  /ui/producers             producers: epoch, per stream next and committed sequence
//	GET  /ui/login, POST /ui/login, POST /ui/logout
//	POST /ui/checkpoint            "Checkpoint now" (admin)
//	GET  /ui/static/{name}         embedded assets, versioned by digest
//
// It reads through consumer-owned interfaces: [Engine] (status, producers,
// checkpoints), [Store] (the state store's checkpoints), a
// committer.Reader (the destination, local or S3 alike) and an
// [Authenticator] (*auth.Gate). Downloads go to the API's
// GET /v1/files/{path}, which takes the same cookie for GET.
//
// # Authorization
//
// With Config.Auth nil every visitor is admin (the command then serves only
// loopback addresses). Otherwise pages need a token of role read or admin,
// from the cookie "eosink_token" (auth.CookieName) that the login form sets
// (HttpOnly, SameSite=Strict, Path=/, Secure over TLS) or from an
// "Authorization: Bearer" header. A visitor without one is sent to
// /ui/login. Only admin sees and may use "Checkpoint now".
//
// Every POST must come from the UI's own origin (Sec-Fetch-Site, else
// Origin against Host: http.CrossOriginProtection) and carry the form
// token of its session in the field "csrf": an HMAC of the session's
// token under a key made at start, so it needs no server state, differs
// per token and dies with the process.
//
// # What is served
//
// Nothing outside the destination: a request path with an empty, "." or
// ".." segment, or a segment that unescapes to hold '/', '\\' or a control
// byte (%2F, %5C, %00, %2e%2e) is refused with 400 before routing, and a
// file page opens its path through the destination's Reader, which opens
// only regular files inside it (the local Reader neither lists nor opens
// symbolic links).
// Every name shown comes from the destination, the state store or a
// client, so it is escaped by html/template; links are built from escaped
// path segments. Every response carries a Content-Security-Policy without
// inline script or style (script-src 'self'; style-src 'self';
// frame-ancestors 'none'), X-Content-Type-Options: nosniff,
// X-Frame-Options: DENY and Referrer-Policy: same-origin.
//
// # Listings
//
// No page grows with the destination or the state store (docs/design.md: no
// answer grows without bound), and no page load lists the whole
// destination. A folder page lists PageSize rows (default 500) by name
// after the cursor ?after= (the last row of the previous page; a folder's
// name ends in '/'), through committer.Pager's ListPage when the Reader has
// it (else List of the folder's prefix only); a sub-folder is one row, and
// a walk that meets more than a few of its files jumps past it with a new
// listing call. So a page costs its rows, not the folder's size; sorting
// by size or time would cost the whole folder, so folders show by name,
// and ?q= keeps the names that start with it. The overview's streams are
// those of the newest committed checkpoints' files in the state store
// (at most 50 checkpoints and about 20,000 files read, 20 streams shown,
// most recent first); without any, the first streams by name from one
// page of the destination. /ui/streams pages every stream by name, counting
// at most 1,000 files of each. Checkpoints page by ?before= (the engine's
// CheckpointRecords), a checkpoint's files by ?from= over its stored file
// list (or its manifest once the store dropped the list). Another node's
// checkpoints (?node=) come from its manifests, oldest first, by ?after=.
// Folder pages take ?node= to show one node's files. /ui/nodes shows every
// node of the destination with its lease (holder, address, expiry, live
// or expired). Everything the UI knows of committed files comes from
// internal/catalog; record counts from its manifest cache, bounded by
// bytes and shared with the API.
//
// File previews read at most 64 KiB and 50 lines (gzip decompressed); a
// line that is valid JSON is pretty-printed and highlighted, others show
// as text.
package web
