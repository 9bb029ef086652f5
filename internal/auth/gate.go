package auth

// This file owns the auth-failure gate: the token check the API and the
// web UI share, and the limit on invalid tokens per client address.

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Gate checks the tokens of the API and the web UI alike, and limits the
// invalid ones each client address may send: both count against one limit,
// so a guesser gains nothing by switching from one to the other. A valid
// token is always served, whatever its address sent before: only invalid
// attempts are refused (429) once the address is over the limit. Behind a
// trusted proxy the address is the client's, as the proxy forwarded it.
// Safe for concurrent use.
type Gate struct {
	tokens  *Tokens
	fails   *failLimiter
	proxies []netip.Prefix
}

// Authenticate returns the role of token, sent with r. ok is false for an
// unknown (or empty) token, which counts against r's client address; wait
// is then non-zero when that address is over the limit: the answer is 429
// too_many_auth_failures with Retry-After, instead of 401. It takes the
// same time whichever token matches.
func (g *Gate) Authenticate(r *http.Request, token string) (role Role, ok bool, wait time.Duration) {
	if token != "" {
		if role, ok := g.tokens.lookup(token); ok {
			return role, true, 0
		}
	}
	return 0, false, g.fails.fail(clientKey(r, g.proxies))
}

// GateConfig holds a Gate's settings.
type GateConfig struct {
	Tokens *Tokens // required
	// Failures invalid tokens an address may send per Window; the table
	// of addresses holds at most Table of them.
	Failures int
	Window   time.Duration
	Table    int
	// Proxies are the trusted proxies (ParseTrustedProxies): behind one,
	// failures count under the client it forwarded for.
	Proxies []netip.Prefix
	// Now is the limiter's clock; nil means time.Now.
	Now func() time.Time
}

// NewGate returns the Gate of cfg.
func NewGate(cfg GateConfig) *Gate {
	fl := newFailLimiter(cfg.Failures, cfg.Window, cfg.Table)
	if cfg.Now != nil {
		fl.now = cfg.Now
	}
	return &Gate{tokens: cfg.Tokens, fails: fl, proxies: slices.Clone(cfg.Proxies)}
}

// failLimiter counts the invalid tokens each client address sends in a
// fixed window. An address that passed the limit is answered 429 until its
// window ends. The table holds at most max addresses: when full, expired
// entries go first, then the one whose window ends soonest. Safe for
// concurrent use.
type failLimiter struct {
	limit  int
	window time.Duration
	max    int
	now    func() time.Time

	mu sync.Mutex
	m  map[string]*failEntry
}

type failEntry struct {
	n   int
	end time.Time // the window's end
}

func newFailLimiter(limit int, window time.Duration, max int) *failLimiter {
	return &failLimiter{limit: limit, window: window, max: max, now: time.Now, m: map[string]*failEntry{}}
}

// clientKey is the address a request's failures are counted under: its
// client's IP, or for IPv6 its /64, which one host usually holds whole.
// The client is the peer, unless the peer is one of the trusted proxies:
// then it is the rightmost address of X-Forwarded-For that is not a
// trusted proxy (every hop appends the address it saw; what lies left of
// the last untrusted one is the client's own claim), else X-Real-IP. A
// request from anywhere else is keyed by its peer: its headers prove
// nothing.
func clientKey(r *http.Request, proxies []netip.Prefix) string {
	peer, ok := parseHost(r.RemoteAddr)
	if !ok {
		return r.RemoteAddr
	}
	if trusted(peer, proxies) {
		peer = forwardedClient(r.Header, peer, proxies)
	}
	if peer.Is4() {
		return peer.String()
	}
	p, _ := peer.Prefix(64)
	return p.String()
}

// forwardedClient returns the client a trusted proxy at peer forwarded the
// request for; peer itself when the proxy said nothing usable.
func forwardedClient(h http.Header, peer netip.Addr, proxies []netip.Prefix) netip.Addr {
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		hops := strings.Split(strings.Join(xff, ","), ",")
		client := peer
		for i := len(hops) - 1; i >= 0; i-- {
			a, ok := parseHost(strings.TrimSpace(hops[i]))
			if !ok {
				// Garbage where a hop should be: the nearest hop that
				// parsed is as far as the chain can be followed.
				return client
			}
			client = a
			if !trusted(a, proxies) {
				return a
			}
		}
		return client // every hop a trusted proxy: the first of them
	}
	if a, ok := parseHost(strings.TrimSpace(h.Get("X-Real-IP"))); ok {
		return a
	}
	return peer
}

// parseHost parses an IP, with or without a port or brackets; IPv4 in
// IPv6 is IPv4.
func parseHost(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func trusted(a netip.Addr, proxies []netip.Prefix) bool {
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fail counts one invalid token from key and returns how long key must
// wait: 0 while it is within the limit.
func (l *failLimiter) fail(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e, ok := l.m[key]
	if !ok || !now.Before(e.end) {
		if !ok && len(l.m) >= l.max {
			if wait := l.evict(now); wait > 0 {
				// Full of addresses over the limit: a new one is limited
				// too (a valid token is still served) until room frees.
				return wait
			}
		}
		e = &failEntry{end: now.Add(l.window)}
		l.m[key] = e
	}
	if e.n <= l.limit { // no further: the count only says "over"
		e.n++
	}
	if e.n <= l.limit {
		return 0
	}
	return e.end.Sub(now)
}

// evict makes room for one entry, dropping ended windows, else the
// entry within the limit whose window ends soonest; never one over the
// limit, whose wait would be forgotten. When every entry is over the
// limit it drops none and returns how long until the first window ends.
// l.mu is held.
func (l *failLimiter) evict(now time.Time) time.Duration {
	var soonest string
	var first time.Time
	for k, e := range l.m {
		if !now.Before(e.end) {
			delete(l.m, k)
			continue
		}
		if first.IsZero() || e.end.Before(first) {
			first = e.end
		}
		if e.n <= l.limit && (soonest == "" || e.end.Before(l.m[soonest].end)) {
			soonest = k
		}
	}
	if len(l.m) < l.max {
		return 0
	}
	if soonest == "" {
		return first.Sub(now)
	}
	delete(l.m, soonest)
	return 0
}

// size returns the addresses held.
func (l *failLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// ParseTrustedProxies parses a comma-separated list of CIDR prefixes or
// single addresses (a /32 or /128), as --trusted-proxies takes it.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			if p.Addr().Is4In6() && p.Bits() >= 96 { // the addresses it holds are compared as IPv4
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("parse trusted proxy %q: want a CIDR prefix (10.0.0.0/8) or an address", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
