package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenFileWarning: a token file other users can read is warned about.
func TestTokenFileWarning(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("admin a-very-long-admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for mode, warn := range map[os.FileMode]bool{0o600: false, 0o640: false, 0o644: true, 0o604: true} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		got := tokenFileWarning(p)
		if (got != "") != warn || warn && !strings.Contains(got, p) {
			t.Errorf("mode %v: warning %q, want one: %v", mode, got, warn)
		}
	}
}
