package auth

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

// Memory is bounded: many addresses failing keep at most Table entries
// (moved from the API's TestAuthFailureLimit with the gate).
func TestFailLimiterBounded(t *testing.T) {
	tk, err := NewTokens(map[string]Role{"r-token-0123456789": RoleRead})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(GateConfig{Tokens: tk, Failures: 5, Window: time.Minute, Table: 3})
	for i := range 100 {
		r := httptest.NewRequest("GET", "/v1/streams", nil)
		r.RemoteAddr = fmt.Sprintf("203.0.113.%d:1", i)
		if _, ok, _ := g.Authenticate(r, "bad-token-0123456789"); ok {
			t.Fatal("a bad token passed")
		}
	}
	if n := g.fails.size(); n > 3 {
		t.Fatalf("%d addresses held, want at most 3", n)
	}
	if role, ok, _ := g.Authenticate(httptest.NewRequest("GET", "/", nil), "r-token-0123456789"); !ok || role != RoleRead {
		t.Fatalf("a valid token: %v %v", role, ok)
	}
}

// TestFailLimiterKeepsLimited: a full table never forgets an address over
// the limit to make room for a new one, so cycling through more addresses
// than the table holds unlocks none of them; the new address is limited
// until room frees. (Before, the entry ending soonest went, limited or
// not.)
func TestFailLimiterKeepsLimited(t *testing.T) {
	l := newFailLimiter(1, time.Minute, 3)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	for i, k := range []string{"a", "b", "c"} {
		now = now.Add(time.Second * time.Duration(i))
		l.fail(k)
		if w := l.fail(k); w == 0 {
			t.Fatalf("%s: not limited after two failures", k)
		}
	}
	if w := l.fail("d"); w == 0 {
		t.Fatal("d: a new address was let in by forgetting a limited one")
	}
	for _, k := range []string{"a", "b", "c"} {
		if w := l.fail(k); w == 0 {
			t.Fatalf("%s: forgotten while over the limit", k)
		}
	}
	now = now.Add(2 * time.Minute) // every window over: room again
	if w := l.fail("d"); w != 0 {
		t.Fatalf("d after the windows ended: wait %s, want none", w)
	}
}
