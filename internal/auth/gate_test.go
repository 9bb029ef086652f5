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
