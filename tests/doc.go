// Package tests holds eosink's black-box end-to-end tests: they build
// cmd/eosink once, run it as a child process on loopback ports, talk to it
// over HTTP only (raw requests and the Go client in client/), kill it with
// SIGKILL and SIGTERM at random moments, stop the S3 server under it, and
// check the promises of docs/design.md from the destination alone: the files on
// disk, or the objects in the bucket, read directly, plus `eosink verify`.
//
// Nothing here imports the engine (server/, api/): what a user runs is what
// is tested.
//
// The S3 tests need a MinIO server binary (scripts/minio.sh installs it),
// the UI test Chromium (scripts/chromium.sh), and the load-balancer tests
// (lb_test.go: three nodes behind deploy/nginx.conf or deploy/haproxy.cfg)
// nginx and HAProxy (scripts/nginx.sh, scripts/haproxy.sh); without them
// they skip, or fail when CI=true.
//
// Knobs, all optional:
//
//	EOSINK_E2E_SEED=n        replay the random choices of a run (printed by every test)
//	EOSINK_E2E_KILLS=n       SIGKILLs per crash loop (default 20 local, 10 S3 multipart,
//	                         5 S3 copy, 6 in the two-node test)
//	EOSINK_E2E_PRODUCERS=n   concurrent producers in the crash loops (default 4)
//	EOSINK_E2E_PRODUCER=raw  crash loops use the test's own HTTP producer instead of
//	                         client/ (to tell a client bug from a service bug)
//	EOSINK_E2E_RACE=1        build the service with -race; a data race fails the test
//	EOSINK_E2E_KEEP=1        keep the logs and data of passing tests too (a failing
//	                         test always keeps them and prints where)
//	EOSINK_LB_KILLS=n        SIGKILLs in TestLBCrashLoop (default 4, one node after another)
//	EOSINK_E2E_FEED_KILLS=n  SIGKILLs in TestFeedCrashLoop, followed by a commit feed
//	                         consumer (default 12)
//	EOSINK_NGINX=path        nginx for the load-balancer tests (default /usr/sbin/nginx)
//	EOSINK_HAPROXY=path      haproxy for them (default /usr/sbin/haproxy)
//	EOSINK_CHROMIUM=path     the browser for TestUIOnBinary (default /usr/bin/chromium,
//	                         installed by scripts/chromium.sh)
//	EOSINK_SCREENSHOTS=dir   keep the UI test's full-page screenshots there
//
// The S3 outage test puts a small reverse proxy between eosink and MinIO
// that stops MinIO at the first commit request of a checkpoint, so the
// outage falls right after the "prepared" record every time.
//
// Timing cannot be replayed: a seed fixes the choices (streams, batch
// sizes, when to kill relative to the start), not the interleaving.
package tests
