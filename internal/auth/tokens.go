package auth

// This file owns the tokens: roles, the token file, and the lookup in
// constant time.

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// Role is what a token may do.
type Role uint8

// Roles. Admin may do everything.
const (
	RoleIngest Role = iota + 1 // write records, init producers, read producers
	RoleRead                   // every GET
	RoleAdmin                  // everything
)

// String returns the role's name as written in a token file.
func (r Role) String() string {
	switch r {
	case RoleIngest:
		return "ingest"
	case RoleRead:
		return "read"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// ParseRole parses "ingest", "read" or "admin".
func ParseRole(s string) (Role, error) {
	for _, r := range []Role{RoleIngest, RoleRead, RoleAdmin} {
		if s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown role %q (want ingest, read or admin)", s)
}

// MinTokenLen is the shortest token accepted, in bytes.
const MinTokenLen = 16

// CookieName is the cookie the web UI stores a token in; the API accepts
// it for GET requests only.
const CookieName = "eosink_token"

type tokenEntry struct {
	sum  [sha256.Size]byte
	role Role
}

// Tokens maps bearer tokens to roles. It is immutable and safe for
// concurrent use.
type Tokens struct {
	entries []tokenEntry
}

// NewTokens returns Tokens holding the given token -> role pairs.
func NewTokens(m map[string]Role) (*Tokens, error) {
	t := &Tokens{}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		if err := t.add(k, m[k]); err != nil {
			return nil, err
		}
	}
	if len(t.entries) == 0 {
		return nil, errors.New("no tokens")
	}
	return t, nil
}

func (t *Tokens) add(token string, role Role) error {
	if role < RoleIngest || role > RoleAdmin {
		return fmt.Errorf("invalid role %d", role)
	}
	if token == "" {
		return errors.New("empty token")
	}
	if len(token) < MinTokenLen {
		return fmt.Errorf("token shorter than %d bytes: it could be guessed", MinTokenLen)
	}
	for _, c := range []byte(token) {
		if c <= ' ' || c == 0x7f {
			return errors.New("token holds a space or control character")
		}
	}
	sum := sha256.Sum256([]byte(token))
	for _, e := range t.entries {
		if e.sum == sum {
			return errors.New("token listed twice")
		}
	}
	t.entries = append(t.entries, tokenEntry{sum: sum, role: role})
	return nil
}

// LoadTokens reads a token file: one "<role> <token>" per line, roles
// ingest, read or admin; blank lines and '#' comments (whole lines, or
// from a field starting with '#') are skipped. A token may appear once.
// A file with no token is an error: it would lock everyone out.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load tokens: %w", err)
	}
	defer f.Close()
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("load tokens %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens parses the token file format of LoadTokens.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if i := slices.IndexFunc(fields, func(f string) bool { return strings.HasPrefix(f, "#") }); i >= 0 {
			fields = fields[:i]
		}
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<role> <token>\", got %d fields", n, len(fields))
		}
		role, err := ParseRole(fields[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if err := t.add(fields[1], role); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if len(t.entries) == 0 {
		return nil, errors.New("no tokens")
	}
	return t, nil
}

// lookup returns token's role. It compares the token's digest with every
// known one, without stopping at a match, so the time taken does not tell
// which token matched or how much of one did.
// Lookup returns token's role, false if unknown. It compares against every
// known token in constant time.
func (t *Tokens) Lookup(token string) (Role, bool) { return t.lookup(token) }

func (t *Tokens) lookup(token string) (Role, bool) {
	sum := sha256.Sum256([]byte(token))
	role, found := 0, 0
	for _, e := range t.entries {
		eq := subtle.ConstantTimeCompare(sum[:], e.sum[:])
		role = subtle.ConstantTimeSelect(eq, int(e.role), role)
		found |= eq
	}
	return Role(role), found == 1
}
