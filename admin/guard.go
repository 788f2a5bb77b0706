package admin

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// setSecurityHeaders sets the headers every response carries, refusals
// included: not cached, not framed, no content sniffing, the page's own
// assets only.
func setSecurityHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
}

// hostPolicy is which Host headers the handler answers: loopback
// addresses, localhost and the allowed names, or any with "*".
type hostPolicy struct {
	any   bool
	names map[string]bool // host names and addresses, lower case, any port
	ports map[string]bool // host:port, lower case
}

// allow adds an allowed host (WithAllowedHosts): "*", a name or an
// address, optionally with a port; it returns why it cannot.
func (p *hostPolicy) allow(h string) error {
	if h == "*" {
		p.any = true
		return nil
	}
	host, port, ok := splitHost(h)
	if !ok || host == "" || !validHostName(host) {
		return fmt.Errorf("allowed host %q is not a host name or address, optionally with a port (such as ops.example.com or ops.example.com:8443), nor *", h)
	}
	if p.names == nil {
		p.names, p.ports = map[string]bool{}, map[string]bool{}
	}
	if port == "" {
		p.names[host] = true
	} else {
		p.ports[net.JoinHostPort(host, port)] = true
	}
	return nil
}

// allows reports whether a request's Host header is answered.
func (p *hostPolicy) allows(hostHeader string) bool {
	if p.any {
		return true
	}
	host, port, ok := splitHost(hostHeader)
	if !ok || host == "" {
		return false
	}
	if host == "localhost" || p.names[host] || (port != "" && p.ports[net.JoinHostPort(host, port)]) {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// splitHost splits a Host header (name, name:port, IPv4, [IPv6] with or
// without a port) into its lower-case host, without a trailing dot, and
// its port; ok is false when it is not of that form.
func splitHost(h string) (host, port string, ok bool) {
	h = strings.ToLower(h)
	switch {
	case strings.HasPrefix(h, "["):
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := h[1:end], h[end+1:]
		if _, err := netip.ParseAddr(host); err != nil || (rest != "" && !strings.HasPrefix(rest, ":")) {
			return "", "", false
		}
		port = strings.TrimPrefix(rest, ":")
		return host, port, validPort(port)
	case strings.Count(h, ":") > 1:
		return "", "", false
	}
	host, port, _ = strings.Cut(h, ":")
	if strings.Contains(h, ":") && port == "" {
		return "", "", false
	}
	return strings.TrimSuffix(host, "."), port, validPort(port)
}

func validPort(p string) bool {
	if p == "" {
		return true
	}
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536 && p[0] != '+'
}

// validHostName reports whether h is a DNS name or an IP address.
func validHostName(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// guard wraps next (the middleware and the pages) in what runs before
// anything else: the security headers, and the refusal of a Host that is
// not allowed, which a DNS rebinding sends (an attacker's name resolved
// to 127.0.0.1 makes the victim's browser treat the page as the
// attacker's own origin, same-origin checks included).
func (h *handler) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w.Header())
		if !h.cfg.hosts.allows(r.Host) {
			h.fail(w, r, http.StatusForbidden, fmt.Sprintf("host %q is not allowed: this admin page answers loopback addresses and localhost, "+
				"and the names allowed with admin.WithAllowedHosts (outbox admin --allow-host): a protection against DNS rebinding", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}
