package api

import (
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
)

// guard refuses, before routing, what a web page in a visitor's browser
// could send us without the visitor meaning to:
//
//   - a state-changing request from another origin (a foreign Origin, or
//     Sec-Fetch-Site other than same-origin or none): a "simple" POST
//     needs no CORS preflight, so without this any site could write,
//     checkpoint and fence producers on a service without tokens;
//   - without tokens, a Host that is not a loopback name, one of
//     Config.Hosts, or (when the service listens on every address) an IP
//     literal: a page whose DNS name was rebound to our address is
//     same-origin to itself, and only its Host gives it away.
//
// Curl and the Go client send neither header and a loopback Host.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg := ""
		if s.auth == nil && !s.hostAllowed(r.Host) {
			msg = "Host " + strconv.Quote(r.Host) + " is not served: without tokens only loopback names and the --listen address are (a DNS-rebinding page names its own host)"
		} else if err := s.origin.Check(r); err != nil {
			msg = "cross-origin " + r.Method + " refused: send it without Origin (curl, the Go client) or from this service's own pages"
		}
		if msg == "" {
			next.ServeHTTP(w, r)
			return
		}
		if ok, _ := path.Match("/v1/streams/*/records", r.URL.Path); ok {
			w.Header().Set(CheckpointHeader, strconv.FormatUint(s.eng.Status().OpenID, 10))
		}
		writeError(w, http.StatusForbidden, &ErrorResponse{Error: CodeForbidden, Message: msg})
	})
}

// hostAllowed reports whether a request's Host names this service when it
// runs without tokens.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	if host == "" {
		return false
	}
	if host == "localhost" || slices.Contains(s.hosts, host) {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || s.anyIP)
}

// hostNames returns the lowercase names of Config.Hosts, and whether one of
// them is an unspecified address (0.0.0.0, ::): a service that listens on
// every address is reached by any of its IPs, none of which a rebound DNS
// name can forge.
func hostNames(hosts []string) (names []string, anyIP bool) {
	for _, h := range hosts {
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		h = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
		if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
			anyIP = true
			continue
		}
		names = append(names, h)
	}
	return names, anyIP
}
