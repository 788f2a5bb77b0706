package admin

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/relay"
)

//go:embed templates/*.html assets/*
var files embed.FS

// handler serves the pages.
type handler struct {
	cfg    config
	insp   *relay.Inspector
	pages  *pages
	assets fs.FS
}

// NewHandler returns the admin page of db's outbox table as an
// http.Handler. It resolves the table (the installed outbox.Plugin's, or
// WithTable) and checks that it exists (an error wrapping
// outbox.ErrNotMigrated) and that every option is usable (an error
// wrapping ErrInvalidOption), so that a handler that was made works.
//
// Every page is server-rendered HTML that works without JavaScript. Every
// change is a POST answered first by a confirmation page saying what would
// change, and only done when that page's form is submitted, on the state
// it confirmed; it is refused in read-only mode (405), with any other
// method (405) and from another origin (403). Only loopback addresses,
// localhost and the names of WithAllowedHosts are answered as Host (403
// otherwise, before anything else runs). Responses are not cached and may
// not be framed.
//
// Without WithMiddleware the handler authenticates nobody: whoever
// reaches an allowed host reads payloads and repairs events. NewHandler
// then logs a warning (to WithLogger's logger, slog.Default() without
// one); serve it so on loopback only, or put
// authentication in front (WithMiddleware, or a proxy that authenticates).
func NewHandler(db *gorm.DB, opts ...Option) (http.Handler, error) {
	cfg := config{log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidOption, strings.Join(cfg.errs, "; "))
	}
	var iopts []relay.InspectorOption
	if cfg.table != "" {
		iopts = append(iopts, relay.InspectTable(cfg.table))
	}
	insp, err := relay.NewInspector(db, iopts...)
	if err != nil {
		if errors.Is(err, relay.ErrInvalidOption) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		return nil, fmt.Errorf("admin: %w", err)
	}
	p, err := newPages()
	if err != nil {
		return nil, err
	}
	static, _ := fs.Sub(files, "assets")
	h := &handler{cfg: cfg, insp: insp, pages: p, assets: static}
	cop := http.NewCrossOriginProtection()
	for _, o := range cfg.origins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("%w: trusted origin: %w", ErrInvalidOption, err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "cross-origin requests that change things are refused")
	}))
	var out http.Handler = cop.Handler(h)
	for _, mw := range cfg.middleware {
		out = mw(out)
	}
	if len(cfg.middleware) == 0 {
		cfg.log.Warn("admin: served without authentication (no WithMiddleware): anyone who reaches the page reads payloads and repairs events; "+
			"serve it on loopback only, or behind authentication", "any_host", cfg.hosts.any)
	}
	return h.guard(out), nil
}

// ServeHTTP routes a request by its path below the prefix: actions are
// POSTs, everything else GET or HEAD.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if h.cfg.prefix != "" && (path == h.cfg.prefix || strings.HasPrefix(path, h.cfg.prefix+"/")) {
		path = strings.TrimPrefix(path, h.cfg.prefix)
	}
	if path == "" {
		path = "/"
	}
	action := strings.HasPrefix(path, "/actions/")
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case action && h.cfg.readOnly:
		w.Header().Set("Allow", "")
		h.fail(w, r, http.StatusMethodNotAllowed, "this admin page is read-only: only GET is allowed")
		return
	case action && r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, r, http.StatusMethodNotAllowed, "actions are POSTs of their confirmation's form")
		return
	case !action && !get:
		w.Header().Set("Allow", "GET, HEAD")
		msg := "only GET is allowed here: changes are POSTs to the actions"
		if h.cfg.readOnly {
			msg = "this admin page is read-only: only GET is allowed"
		}
		h.fail(w, r, http.StatusMethodNotAllowed, msg)
		return
	}
	switch {
	case action:
		h.action(w, r, strings.TrimPrefix(path, "/actions/"))
	case strings.HasPrefix(path, "/assets/"):
		name := strings.TrimPrefix(path, "/assets/")
		if _, err := fs.Stat(h.assets, name); err != nil || name == "" || strings.Contains(name, "/") {
			h.fail(w, r, http.StatusNotFound, "no such asset")
			return
		}
		w.Header().Set("Cache-Control", "max-age=300")
		http.ServeFileFS(w, r, h.assets, name)
	case path == "/":
		h.overview(w, r)
	case path == "/events" || path == "/events/":
		h.events(w, r)
	case strings.HasPrefix(path, "/events/"):
		h.event(w, r, strings.TrimPrefix(path, "/events/"))
	case path == "/keys" || path == "/keys/":
		h.keys(w, r)
	case path == "/consumers" || path == "/consumers/":
		h.consumers(w, r)
	default:
		h.fail(w, r, http.StatusNotFound, "no such page")
	}
}

// fail renders an error page.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	h.render(w, r, code, "error", map[string]any{"Code": code, "Status": http.StatusText(code), "Message": msg})
}

// failErr renders err: invalid input as 400, anything else as 500 (logged).
func (h *handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	var ie *inputError
	switch {
	case errors.As(err, &ie):
		h.fail(w, r, http.StatusBadRequest, ie.Error())
	case errors.Is(err, relay.ErrInvalidOption):
		h.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, relay.ErrEventNotFound):
		h.fail(w, r, http.StatusNotFound, err.Error())
	default:
		h.cfg.log.Error("admin: request failed", "path", r.URL.Path, "error", err)
		h.fail(w, r, http.StatusInternalServerError, err.Error())
	}
}

// inputError is a request parameter the handler cannot use.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func inputf(format string, args ...any) error { return &inputError{fmt.Sprintf(format, args...)} }
