package main

import (
	"io"
	"testing"
)

func TestMaxOpenFilesDefault(t *testing.T) {
	for soft, want := range map[uint64]int{
		1024:    448,   // half, less the reserve
		256:     64,    // a small limit: a quarter
		20000:   9936,  // half, less the reserve
		1 << 62: 65536, // unlimited: capped
		8:       2,
		2:       1,
	} {
		if got := maxOpenFilesFor(soft); got != want {
			t.Errorf("soft limit %d: %d, want %d", soft, got, want)
		}
	}
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	if err := envFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if f.maxOpenFiles < 1 {
		t.Fatalf("default --max-open-files %d", f.maxOpenFiles)
	}
	t.Setenv("EOSINK_MAX_OPEN_FILES", "7")
	if err := envFlags(serveFlagSet(&f, io.Discard), nil); err != nil || f.maxOpenFiles != 7 {
		t.Fatalf("--max-open-files from the environment: %d %v", f.maxOpenFiles, err)
	}
	if err := envFlags(serveFlagSet(&f, io.Discard), []string{"--max-open-files", "0"}); err == nil {
		t.Fatal("--max-open-files 0 accepted")
	}
}
