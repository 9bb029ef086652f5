package api

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// failLimiter counts the invalid tokens each client address sends in a
// fixed window. An address that reached the limit is refused until its
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
// IP, or for IPv6 its /64, which one host usually holds whole. Proxy
// headers are not trusted.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// blocked returns how long key must still wait, 0 if it may try.
func (l *failLimiter) blocked(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[key]
	if !ok {
		return 0
	}
	now := l.now()
	if !now.Before(e.end) {
		delete(l.m, key)
		return 0
	}
	if e.n < l.limit {
		return 0
	}
	return e.end.Sub(now)
}

// fail counts one invalid token from key.
func (l *failLimiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e, ok := l.m[key]; ok && now.Before(e.end) {
		e.n++
		return
	}
	if len(l.m) >= l.max {
		l.evict(now)
	}
	l.m[key] = &failEntry{n: 1, end: now.Add(l.window)}
}

// evict makes room for one entry; l.mu is held.
func (l *failLimiter) evict(now time.Time) {
	var soonest string
	for k, e := range l.m {
		if !now.Before(e.end) {
			delete(l.m, k)
			continue
		}
		if soonest == "" || e.end.Before(l.m[soonest].end) {
			soonest = k
		}
	}
	if len(l.m) >= l.max && soonest != "" {
		delete(l.m, soonest)
	}
}

// size returns the addresses held.
func (l *failLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
