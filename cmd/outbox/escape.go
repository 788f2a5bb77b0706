package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Text from the database (event ids, types, last errors, payloads, a
// relay's host) and from the command line may hold terminal control
// characters: an escape sequence repaints the operator's terminal, a
// carriage return or a newline forges a line, a bidirectional override
// reverses what follows. Every text output escapes them: cells and lines
// explicitly (cell, line, block), and everything written to stdout and
// stderr once more (safeWriter), so that nothing reaches a terminal raw.

// isControl reports whether r must not reach a terminal raw: C0 (tab and
// newline too, which escape decides on), DEL, C1, the Unicode
// bidirectional controls and marks, and the line and paragraph
// separators.
func isControl(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x2028 && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// escape returns s with every control character (isControl) and every
// byte that is not UTF-8 escaped: \n, \r and \t as such, other C0 bytes
// and invalid bytes as \xHH, the rest as \uHHHH (which JSON reads as the
// same character, so that JSON output keeps its values). keep lists the
// characters left as they are (newline for a block of text); backslash
// escapes backslashes too, so that an escape cannot be told from text.
func escape(s string, keep string, backslash bool) string {
	if !needsEscape(s, keep, backslash) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && backslash:
			b.WriteString(`\\`)
		case !isControl(r) || strings.ContainsRune(keep, r):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

func needsEscape(s, keep string, backslash bool) bool {
	for _, r := range s {
		if r == utf8.RuneError || (r == '\\' && backslash) || (isControl(r) && !strings.ContainsRune(keep, r)) {
			return true
		}
	}
	return false
}

// cell escapes a table cell or a one-line field: every control
// character, newlines and tabs included, and backslashes.
func cell(s string) string { return escape(s, "", true) }

// line escapes a message (an error) onto one line.
func line(s string) string { return escape(s, "", false) }

// block escapes text shown as an indented block (a last error, a
// payload): its newlines stay.
func block(s string) string { return escape(s, "\n", false) }

// safeWriter escapes, in each Write on its own, every control character
// but newline and tab: the last guard of stdout and stderr.
type safeWriter struct{ w io.Writer }

func (w safeWriter) Write(p []byte) (int, error) {
	s := string(p)
	if needsEscape(s, "\n\t", false) {
		s = escape(s, "\n\t", false)
	}
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
