package admin

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gormoutbox/outbox"
)

// ErrInvalidOption is wrapped by the errors of NewHandler for an option it
// cannot work with.
var ErrInvalidOption = errors.New("admin: invalid option")

// Option configures NewHandler.
type Option func(*config)

// Redactor rewrites an event's payload before the event page shows it, for
// example to mask personal data. It receives the event (Payload included)
// and returns the bytes to show.
type Redactor func(e *outbox.OutboxEvent) []byte

type config struct {
	prefix     string
	readOnly   bool
	middleware []func(http.Handler) http.Handler
	redact     Redactor
	log        *slog.Logger
	table      string
	origins    []string
	hosts      hostPolicy
	dead       []deadSource
	errs       []string
}

// WithPrefix says under which path the handler is mounted, such as
// "/outbox" (a trailing slash is ignored), so that its links and forms
// point there. Requests are accepted with the prefix (mux.Handle("/outbox/",
// h)) and without it (http.StripPrefix). The default is the root.
func WithPrefix(p string) Option {
	return func(c *config) {
		p = strings.TrimRight(p, "/")
		if p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#\"'<> ")) {
			c.errs = append(c.errs, fmt.Sprintf("prefix %q must be a path starting with /", p))
		}
		c.prefix = p
	}
}

// WithReadOnly makes the handler refuse every request but GET and HEAD
// (405) and hide the actions: for operators who may look but not touch.
func WithReadOnly() Option { return func(c *config) { c.readOnly = true } }

// WithMiddleware wraps the handler in mw, outermost last given: the place
// for authentication (see BasicAuth) and authorization. Every request,
// assets included, passes through it.
func WithMiddleware(mw func(http.Handler) http.Handler) Option {
	return func(c *config) {
		if mw == nil {
			c.errs = append(c.errs, "middleware is nil")
			return
		}
		c.middleware = append(c.middleware, mw)
	}
}

// WithRedactor makes the event page show r's rewrite of a payload instead
// of the payload. List pages never show payloads.
func WithRedactor(r Redactor) Option { return func(c *config) { c.redact = r } }

// WithLogger logs the actions taken (event ids and counts, never payloads)
// and server errors to l (default slog.Default()), and NewHandler's
// warning when the page is served without authentication.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithTable makes the handler show the outbox table name instead of the
// table of the outbox.Plugin installed on the database.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithTrustedOrigin lets POSTs come from another origin, such as
// "https://ops.example.com" behind a proxy that rewrites the host. Other
// cross-origin POSTs are refused (403).
func WithTrustedOrigin(origin string) Option {
	return func(c *config) { c.origins = append(c.origins, origin) }
}

// WithAllowedHosts lets the handler answer requests whose Host header
// names one of hosts, such as "ops.example.com" (any port) or
// "ops.example.com:8443" (that port), beside the loopback addresses and
// localhost it always answers; "*" answers any Host. Any other Host is
// refused (403) before anything else runs, middleware included: a DNS
// rebinding (an attacker's name resolved to 127.0.0.1) sends the
// attacker's name, and the browser then treats the page as the
// attacker's own origin, same-origin checks included. Allow the name a
// proxy forwards, or "*" when the proxy checks the Host itself.
func WithAllowedHosts(hosts ...string) Option {
	return func(c *config) {
		for _, h := range hosts {
			if err := c.hosts.allow(h); err != nil {
				c.errs = append(c.errs, err.Error())
			}
		}
	}
}

// BasicAuth returns a middleware that requires HTTP basic authentication
// with user and password (compared in constant time), for WithMiddleware.
func BasicAuth(user, password string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			uok := subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1
			pok := subtle.ConstantTimeCompare([]byte(p), []byte(password)) == 1
			if !ok || !uok || !pok {
				w.Header().Set("WWW-Authenticate", `Basic realm="outbox admin", charset="UTF-8"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
