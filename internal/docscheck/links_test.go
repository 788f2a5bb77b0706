package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// link is a Markdown link or image: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// codeSpan is inline code, whose text is not a link.
var codeSpan = regexp.MustCompile("`[^`]*`")

// heading is an ATX heading.
var heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// slug is GitHub's anchor of a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces turned into hyphens.
func slug(h string) string {
	h = strings.ReplaceAll(h, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// prose returns the lines of a Markdown text outside fenced code blocks.
func prose(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			out = append(out, l)
		}
	}
	return out
}

// anchors returns the anchors of a Markdown file's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, l := range prose(text) {
		if m := heading.FindStringSubmatch(l); m != nil {
			a := slug(m[1])
			for i := 1; out[a]; i++ { // GitHub numbers repeated headings
				a = fmt.Sprintf("%s-%d", slug(m[1]), i)
			}
			out[a] = true
		}
	}
	return out
}

// checkLinks checks the relative links of a Markdown file (relative to
// root): the file or folder exists, and an anchor names a heading of the
// Markdown file it points to.
func checkLinks(root, name string) []string {
	text, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		return []string{err.Error()}
	}
	var errs []string
	for i, l := range prose(string(text)) {
		for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := filepath.Join(root, filepath.Dir(name), filepath.FromSlash(path))
			if path == "" {
				file = filepath.Join(root, name)
			}
			if _, err := os.Stat(file); err != nil {
				errs = append(errs, fmt.Sprintf("%s: the link %s: no such file", name, target))
				continue
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			md, err := os.ReadFile(file)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if !anchors(string(md))[anchor] {
				errs = append(errs, fmt.Sprintf("%s: the link %s: no heading %q there (prose line %d)", name, target, anchor, i+1))
			}
		}
	}
	return errs
}

// The relative links of the README, the guides and the other Markdown
// pages lead to files that exist and headings that exist.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files := append(docs(t, root), "ARCHITECTURE.md", "CHANGELOG.md", "tests/GUARANTEES.md", "bench/README.md", "examples/asynq/README.md")
	for _, f := range files {
		for _, e := range checkLinks(root, f) {
			t.Error(e)
		}
	}
}

// The link checker reports a missing file and a missing heading.
func TestLinkCheckerCatches(t *testing.T) {
	root := t.TempDir()
	page := "# Title\n\n## Consumers' dead letters in the `CLI`\n\n```sh\n# not a heading\n```\n"
	if err := os.WriteFile(filepath.Join(root, "b.md"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ md, wantErr string }{
		{"[ok](b.md#consumers-dead-letters-in-the-cli) [top](#title-of-a) [web](https://example.com/x#y)\n# Title of a\n", ""},
		{"[x](c.md)\n", "no such file"},
		{"[x](b.md#not-a-heading)\n", "no heading"},
		{"[x](#nowhere)\n", "no heading"},
		{"`[x](c.md)` in code is not a link\n", ""},
	} {
		if err := os.WriteFile(filepath.Join(root, "a.md"), []byte(tc.md), 0o644); err != nil {
			t.Fatal(err)
		}
		errs := checkLinks(root, "a.md")
		switch {
		case tc.wantErr == "" && len(errs) > 0:
			t.Errorf("%q: want no error, got %q", tc.md, errs)
		case tc.wantErr != "" && (len(errs) != 1 || !strings.Contains(errs[0], tc.wantErr)):
			t.Errorf("%q: want an error containing %q, got %q", tc.md, tc.wantErr, errs)
		}
	}
}
