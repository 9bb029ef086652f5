//go:build ignore

// genv2 writes testdata/v2-state.db, a version 2 state store as eosink
// wrote it before the store had its own record types (commit 0e1be53 plus
// the start benchmark): TestV2Fixture opens it. Run from recovery/:
//
//	go run testdata/genv2.go
//
// It is kept for the record; running it on later code writes what that
// code writes, which is no longer a fixture of the old format.
package main

import (
	"log"
	"os"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
)

func main() {
	const path = "testdata/v2-state.db"
	_ = os.Remove(path)
	s, err := recovery.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	_, err = s.InitProducerAt("alice", at)
	must(err)
	_, err = s.InitProducerAt("alice", at.Add(time.Second)) // epoch 1
	must(err)
	_, err = s.InitProducerAt("bob", at)
	must(err)
	must(s.Reserve(2048))
	local := committer.File{Stream: "clicks", Temp: "/data/staging/part-n1-00000000000000000001-0000.ndjson.inprogress",
		Final: "clicks/dt=2026-11-30/hour=12/part-n1-00000000000000000001-0000.ndjson", Bytes: 42, Records: 2, CRC32C: "0a1b2c3d",
		Producers: map[string]committer.SeqRanges{"alice": {{0, 1}}}}
	c1 := &recovery.Checkpoint{ID: 1, StartedAt: at, PreparedAt: at.Add(10 * time.Millisecond), Records: 2, Bytes: 42,
		Files: []committer.File{local}, Seqs: map[string]map[string]int64{"alice": {"clicks": 2}},
		Keys: []recovery.Key{{Stream: "logs", Key: "k-1", Hash: [32]byte{1, 2, 3}, Checkpoint: 1, At: at}}}
	must(s.Prepare(c1))
	must(s.Commit(1, at.Add(20*time.Millisecond), 20, 1000))
	must(s.Abort(&recovery.Checkpoint{ID: 2, StartedAt: at.Add(time.Second), Records: 1, Bytes: 9}, "pre-commit: disk full"))
	s3 := committer.File{Stream: "views", Temp: "/data/staging/part-n1-00000000000000000003-0000.txt.inprogress",
		Final: "views/dt=2026-11-30/hour=12/part-n1-00000000000000000003-0000.txt", Bytes: 7 << 20, Records: 1000, CRC32C: "deadbeef",
		Producers: map[string]committer.SeqRanges{"bob": {{0, 3}, {5, 9}}},
		UploadID:  "upload-xyz", Parts: []committer.Part{{Number: 1, ETag: "\"e1\"", Size: 5 << 20}, {Number: 2, ETag: "\"e2\"", Size: 2 << 20}},
		StagingKey: "_staging/n1/x", ETag: "\"whole\""}
	must(s.PutIntents(3, []committer.File{s3}))
	c3 := &recovery.Checkpoint{ID: 3, StartedAt: at.Add(2 * time.Second), PreparedAt: at.Add(2*time.Second + time.Millisecond),
		Records: 1000, Bytes: 7 << 20, Files: []committer.File{s3}, Seqs: map[string]map[string]int64{"bob": {"views": 10}, "alice": {"clicks": 3}}}
	must(s.Prepare(c3))
	orphan := committer.File{Stream: "x", Final: "x/dt=2026-11-30/hour=12/part-n1-00000000000000000004-0000.ndjson", UploadID: "upload-orphan"}
	must(s.PutIntents(4, []committer.File{orphan}))
	must(s.Close())
}
