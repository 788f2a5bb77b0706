package main

import (
	"io"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Passwords never reach the CLI's output. Two defences, so that a gap in
// one does not print a password:
//
//   - every address the CLI echoes goes through maskDSN, which finds the
//     password by the address's shape even when the address does not parse
//     (over-masking rather than under-masking);
//   - every password the CLI learns (from the arguments, the environment,
//     and the drivers' parsed configurations) is registered in a secrets
//     set, and stderr and error messages are scrubbed of it, whatever
//     printed it (a driver's error, a log line).

// mask replaces a password.
const mask = "xxxxx"

// minSecretLen is the shortest text the scrubber removes from output: a
// password of one or two characters would garble every line, and is
// masked structurally anyway.
const minSecretLen = 3

var (
	urlPrefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)
	kvFormRE    = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)
	// secretKeyRE finds key=value pairs whose key names a secret, in a
	// libpq string or a URL query.
	secretKeyRE = regexp.MustCompile(`(?i)(?:^|[\s?&;])[A-Za-z0-9_.-]*(?:pass|pwd|secret|token)[A-Za-z0-9_.-]*\s*=\s*`)
)

// span is the byte range [start, end) of a secret in a string.
type span struct{ start, end int }

// secretSpans finds the passwords in an address of any form: the
// userinfo of a URL or of a MySQL DSN (up to the LAST '@', since a
// password may hold '@'), and the values of key=value pairs whose key
// names a secret (libpq strings: quoted or up to a space; URL queries: up
// to '&'). Spans are sorted and do not overlap.
func secretSpans(raw string) []span {
	var out []span
	isKV := kvFormRE.MatchString(raw)
	sqliteForm := hasSQLitePrefix(raw)
	if !isKV && !sqliteForm {
		start := 0
		if m := urlPrefixRE.FindStringIndex(raw); m != nil {
			start = m[1]
		}
		if at := strings.LastIndex(raw, "@"); at > start {
			if colon := strings.IndexByte(raw[start:at], ':'); colon >= 0 {
				out = append(out, span{start + colon + 1, at})
			}
		}
	}
	for _, m := range secretKeyRE.FindAllStringIndex(raw, -1) {
		end := valueEnd(raw, m[1], isKV)
		if end > m[1] {
			out = append(out, span{m[1], end})
		}
	}
	return merge(out)
}

// valueEnd returns where the value starting at i ends: in a libpq
// string after the closing quote of a quoted value (or at the end of an
// unterminated one) or at a space; in a URL query at '&' or '#'.
func valueEnd(raw string, i int, libpq bool) int {
	if libpq {
		end, _ := libpqValueEnd(raw, i)
		return end
	}
	if j := strings.IndexAny(raw[i:], "&#"); j >= 0 {
		return i + j
	}
	return len(raw)
}

// libpqValueEnd returns where the libpq value starting at i ends, and
// false for a quoted value that is never closed. A backslash escapes the
// next character, quoted or not.
func libpqValueEnd(s string, i int) (int, bool) {
	quoted := i < len(s) && s[i] == '\''
	if quoted {
		i++
	}
	for j := i; j < len(s); j++ {
		switch {
		case s[j] == '\\':
			j++
		case quoted && s[j] == '\'':
			return j + 1, true
		case !quoted && isSpace(s[j]):
			return j, true
		}
	}
	return len(s), !quoted
}

func merge(spans []span) []span {
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && s.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// maskDSN returns raw with every password it holds replaced by xxxxx.
func maskDSN(raw string) string {
	spans := secretSpans(raw)
	if len(spans) == 0 {
		return raw
	}
	var sb strings.Builder
	last := 0
	for _, s := range spans {
		sb.WriteString(raw[last:s.start])
		sb.WriteString(mask)
		last = s.end
	}
	sb.WriteString(raw[last:])
	return sb.String()
}

// secretsOf returns the passwords in raw, as written and decoded (percent
// escapes, libpq quotes), for the scrubber.
func secretsOf(raw string) []string {
	var out []string
	for _, s := range secretSpans(raw) {
		text := raw[s.start:s.end]
		out = append(out, text)
		if u, err := url.PathUnescape(text); err == nil {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(text); err == nil {
			out = append(out, u)
		}
		if t := strings.TrimPrefix(text, "'"); t != text {
			t = strings.TrimSuffix(t, "'")
			out = append(out, t, strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(t))
		}
	}
	return out
}

// secrets is the set of passwords the CLI must never print.
type secrets struct {
	mu   sync.Mutex
	list []string
}

// add registers passwords (shorter ones than minSecretLen are ignored).
func (s *secrets) add(pw ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range pw {
		if len(p) >= minSecretLen && !slices.Contains(s.list, p) {
			s.list = append(s.list, p)
		}
	}
	// Longest first, so that a password containing another is removed whole.
	sort.Slice(s.list, func(i, j int) bool { return len(s.list[i]) > len(s.list[j]) })
}

// addFrom registers the passwords found in an address.
func (s *secrets) addFrom(raw string) { s.add(secretsOf(raw)...) }

// scrub returns text without any registered password.
func (s *secrets) scrub(text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.list {
		text = strings.ReplaceAll(text, p, mask)
	}
	return text
}

// scrubWriter removes registered passwords from what is written through
// it. Each Write is scrubbed on its own: log handlers and the error
// printer write whole lines.
type scrubWriter struct {
	w io.Writer
	s *secrets
}

func (w scrubWriter) Write(p []byte) (int, error) {
	clean := w.s.scrub(string(p))
	if _, err := io.WriteString(w.w, clean); err != nil {
		return 0, err
	}
	return len(p), nil
}
