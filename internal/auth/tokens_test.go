package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	good := "# eosink tokens\n\nadmin  a-very-long-admin-token\t# the operator\n  read r-token-0123456789\ningest i-token-0123456789 # a pipeline\n"
	tk, err := ParseTokens(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]Role{"a-very-long-admin-token": RoleAdmin, "r-token-0123456789": RoleRead, "i-token-0123456789": RoleIngest} {
		if got, ok := tk.lookup(tok); !ok || got != want {
			t.Errorf("%s: %v %v", tok, got, ok)
		}
	}
	for _, tok := range []string{"", "r-token-012345678", "r-token-0123456789x", "R-TOKEN-0123456789", "#"} {
		if _, ok := tk.lookup(tok); ok {
			t.Errorf("%q accepted", tok)
		}
	}
	for _, tc := range []struct{ in, err string }{
		{"", "no tokens"},
		{"# only a comment\n", "no tokens"},
		{"read token-one-0123456789\nwrite token-two-0123456789\n", `line 2: unknown role "write"`},
		{"read\n", "line 1: want"},
		{"read token-one-0123456789\n\nadmin token-two-0123456789 extra\n", "line 3: want"},
		{"read token-one-0123456789\nadmin token-one-0123456789\n", "line 2: token listed twice"},
		{"Admin token-one-0123456789\n", "line 1: unknown role"},
		{"read token-one-0123456789\nadmin 0123456789abcde\n", "line 2: token shorter than 16 bytes"},
	} {
		_, err := ParseTokens(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.err)
		}
	}

	dir := t.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte("read token-one-0123456789\nbogus token-two-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(p); err == nil || !strings.Contains(err.Error(), p+": line 2") {
		t.Errorf("load: %v", err)
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file loaded")
	}
	if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(p); err != nil {
		t.Error(err)
	}
}
