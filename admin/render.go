package admin

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"overview", "events", "event", "keys", "consumers", "confirm", "done", "error"}

// pages holds the parsed templates, by page name.
type pages struct{ t map[string]*template.Template }

func newPages() (*pages, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("admin: parsing the layout: %w", err)
	}
	p := &pages{t: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(files, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("admin: parsing page %s: %w", name, err)
		}
		p.t[name] = t
	}
	return p, nil
}

// view is what every page's template receives; D is the page's own data.
type view struct {
	Base, Title, Nav, Table, Dialect string
	ReadOnly                         bool
	D                                any
}

// render writes the page name with data d.
func (h *handler) render(w http.ResponseWriter, r *http.Request, code int, name string, d any) {
	title, _ := d.(map[string]any)["Title"].(string)
	if title == "" {
		title = name
	}
	v := view{Base: h.cfg.prefix, Title: title, Nav: name, Table: h.insp.Table(), Dialect: h.insp.Dialect(), ReadOnly: h.cfg.readOnly, D: d}
	var buf bytes.Buffer
	if err := h.pages.t[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.cfg.log.Error("admin: rendering a page", "page", name, "error", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(escapeControls(buf.Bytes()))
	}
}

// isControl reports whether r is a control character that the page never
// carries raw: C0 but tab, newline and carriage return, DEL, C1, the
// Unicode bidirectional controls and marks (which would reorder what an
// operator reads), and the line and paragraph separators.
func isControl(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	}
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x2028 && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// escapeControls rewrites the control characters (isControl) and the
// bytes that are not UTF-8 of a page html/template rendered, which
// escapes markup but not them: in text as
// a visible escape (\x1b, \u202e), as the CLI shows them; in an
// attribute value (always double-quoted by html/template, its quotes
// escaped) as a character reference, which a form posts back as the
// character itself (but for C1 characters, which HTML reads as
// Windows-1252).
func escapeControls(page []byte) []byte {
	if !bytes.ContainsFunc(page, isControl) && utf8.Valid(page) {
		return page
	}
	var out bytes.Buffer
	out.Grow(len(page) + 64)
	inTag, inValue := false, false
	for i := 0; i < len(page); {
		r, size := utf8.DecodeRune(page[i:])
		switch {
		case r == utf8.RuneError && size == 1 && inValue:
			out.WriteString("&#xfffd;")
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&out, `\x%02x`, page[i])
		case isControl(r) && inValue:
			fmt.Fprintf(&out, "&#x%x;", r)
		case isControl(r) && r < 0x20:
			fmt.Fprintf(&out, `\x%02x`, r)
		case isControl(r):
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			switch {
			case r == '<' && !inTag:
				inTag = true
			case r == '"' && inTag:
				inValue = !inValue
			case r == '>' && inTag && !inValue:
				inTag = false
			}
			out.Write(page[i : i+size])
		}
		i += size
	}
	return out.Bytes()
}

var funcs = template.FuncMap{
	"ago":   ago,
	"when":  when,
	"whenp": func(t *time.Time) string { return when(deref(t)) },
	"str": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"short": func(s *string, n int) string {
		if s == nil {
			return ""
		}
		if r := []rune(*s); len(r) > n {
			return string(r[:n]) + "…"
		}
		return *s
	},
	"statuses": func() []outbox.Status {
		return []outbox.Status{outbox.StatusPending, outbox.StatusPublishing, outbox.StatusPublished, outbox.StatusFailed, outbox.StatusDead}
	},
	"count":   func(m map[outbox.Status]int64, s outbox.Status) int64 { return m[s] },
	"join":    strings.Join,
	"pathesc": url.PathEscape,
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// when formats an instant in UTC.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// ago formats a duration for people.
func ago(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
