package docscheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// marker precedes a ```go block: <!-- example: DIR NAME -->.
var marker = regexp.MustCompile(`^\s*<!--\s*example:\s*(\S+)\s+(\S+)\s*-->\s*$`)

// fence opens or closes a fenced code block; the group is its language.
var fence = regexp.MustCompile("^\\s*```+\\s*(\\S*)\\s*$")

// block is a ```go block of a Markdown file and the function it names.
type block struct {
	file      string // as reported
	line      int    // of the opening fence, from 1
	dir, name string // of the marker; dir empty: no marker
	text      string // the code between the fences
}

// parseMarkdown returns the ```go blocks of a Markdown text, and the
// mistakes of its markers: a marker that no ```go block follows.
func parseMarkdown(file, text string) ([]block, []string) {
	lines := strings.Split(text, "\n")
	var blocks []block
	var errs []string
	for i := 0; i < len(lines); i++ {
		if m := marker.FindStringSubmatch(lines[i]); m != nil {
			if i+1 >= len(lines) || !isGoFence(lines[i+1]) {
				errs = append(errs, fmt.Sprintf("%s:%d: the marker %s %s is not followed by a ```go block", file, i+1, m[1], m[2]))
			}
			continue
		}
		f := fence.FindStringSubmatch(lines[i])
		if f == nil {
			continue
		}
		start := i
		for i++; i < len(lines) && fence.FindStringSubmatch(lines[i]) == nil; i++ {
		}
		if f[1] != "go" {
			continue
		}
		b := block{file: file, line: start + 1, text: strings.Join(lines[start+1:min(i, len(lines))], "\n")}
		if start > 0 {
			if m := marker.FindStringSubmatch(lines[start-1]); m != nil {
				b.dir, b.name = m[1], m[2]
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, errs
}

func isGoFence(line string) bool {
	f := fence.FindStringSubmatch(line)
	return f != nil && f[1] == "go"
}

// source finds NAME in the _test.go files of dir: the body of an Example
// function, or the whole declaration of a method Type.Method.
func source(dir, name string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no _test.go file in %s", dir)
	}
	recv, fn, isMethod := strings.Cut(name, ".")
	if !isMethod {
		fn, recv = name, ""
		if !strings.HasPrefix(name, "Example") {
			return "", fmt.Errorf("%s is neither an Example function nor a method Type.Method", name)
		}
	}
	fset := token.NewFileSet()
	var found []string
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return "", err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != fn || receiver(fd) != recv || fd.Body == nil {
				continue
			}
			tf := fset.File(fd.Pos())
			if isMethod {
				found = append(found, string(src[tf.Offset(fd.Pos()):tf.Offset(fd.End())]))
			} else {
				found = append(found, string(src[tf.Offset(fd.Body.Lbrace)+1:tf.Offset(fd.Body.Rbrace)]))
			}
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no function %s in the _test.go files of %s", name, dir)
	case 1:
		return found[0], nil
	default: // an internal and an external test package of one folder
		return "", fmt.Errorf("%s is defined %d times in the _test.go files of %s", name, len(found), dir)
	}
}

// receiver is the type name of a method's receiver, "" for a function.
func receiver(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}

// normalize removes the lines' common indentation (tabs counted as four
// spaces), their trailing blanks, and blank lines at either end.
func normalize(s string) []string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	common := -1
	for i, l := range lines {
		l = strings.TrimRight(l, " \t")
		rest := strings.TrimLeft(l, " \t")
		indent := strings.ReplaceAll(l[:len(l)-len(rest)], "\t", "    ")
		lines[i] = indent + rest
		if rest != "" && (common < 0 || len(indent) < common) {
			common = len(indent)
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// check compares a block with the function its marker names, relative to
// root.
func check(root string, b block) error {
	if b.dir == "" {
		return fmt.Errorf("%s:%d: a ```go block without a marker <!-- example: DIR NAME --> on the line before it", b.file, b.line)
	}
	src, err := source(filepath.Join(root, filepath.FromSlash(b.dir)), b.name)
	if err != nil {
		return fmt.Errorf("%s:%d: %w", b.file, b.line, err)
	}
	got, want := normalize(b.text), normalize(src)
	for i := 0; i < max(len(got), len(want)); i++ {
		g, w := "(nothing)", "(nothing)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Errorf("%s:%d: the block differs from %s in %s at its line %d:\n  doc:  %s\n  code: %s",
				b.file, b.line, b.name, b.dir, i+1, g, w)
		}
	}
	return nil
}

// checkFiles checks the Markdown files, relative to root, and returns how
// many ```go blocks matched their functions.
func checkFiles(root string, files []string) (int, []string) {
	matched := 0
	var errs []string
	for _, name := range files {
		text, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		blocks, markerErrs := parseMarkdown(name, string(text))
		errs = append(errs, markerErrs...)
		for _, b := range blocks {
			if err := check(root, b); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			matched++
		}
	}
	return matched, errs
}

// docs lists README.md and docs/*.md, relative to root.
func docs(t *testing.T, root string) []string {
	t.Helper()
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, g := range guides {
		files = append(files, filepath.ToSlash(filepath.Join("docs", filepath.Base(g))))
	}
	sort.Strings(files[1:])
	return files
}

// Every ```go block of the README and the guides is the code of a function
// that go test compiles.
func TestDocExamples(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files := docs(t, root)
	if len(files) < 2 {
		t.Fatalf("no guide in %s/docs", root)
	}
	matched, errs := checkFiles(root, files)
	for _, e := range errs {
		t.Error(e)
	}
	if matched == 0 {
		t.Error("no ```go block found: the test would pass on anything")
	}
	t.Logf("%d ```go blocks in %d files match their functions", matched, len(files))
}

// The checker itself: each kind of mistake is reported, and the right
// blocks pass.
func TestCheckerCatches(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "pkg"), 0o755))
	must(os.WriteFile(filepath.Join(root, "pkg", "x_test.go"), []byte("package pkg_test\n\n"+
		"type T struct{}\n\n"+
		"func (t *T) Hook() error {\n\treturn nil\n}\n\n"+
		"func Example() {\n\tx := 1\n\tif x > 0 {\n\t\tprintln(x)\n\t}\n}\n\n"+
		"func helper() {}\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "pkg", "y_test.go"), []byte("package pkg\n\nfunc ExampleTwice() {}\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "pkg", "z_test.go"), []byte("package pkg_test\n\nfunc ExampleTwice() {}\n"), 0o644))
	for _, tc := range []struct {
		name, md, wantErr string
	}{
		{"body", "<!-- example: pkg Example -->\n```go\nx := 1\nif x > 0 {\n    println(x)\n}\n```\n", ""},
		{"indented body", "- a list item:\n\n  <!-- example: pkg Example -->\n  ```go\n  x := 1\n  if x > 0 {\n  \tprintln(x)\n  }\n  ```\n", ""},
		{"method", "<!-- example: pkg T.Hook -->\n```go\nfunc (t *T) Hook() error {\n\treturn nil\n}\n```\n", ""},
		{"other blocks", "```sh\ngo test ./...\n```\n\n```\nplain\n```\n", ""},
		{"no marker", "```go\nx := 1\n```\n", "without a marker"},
		{"marker not right before", "<!-- example: pkg Example -->\n\n```go\nx := 1\n```\n", "not followed by"},
		{"changed line", "<!-- example: pkg Example -->\n```go\nx := 2\nif x > 0 {\n\tprintln(x)\n}\n```\n", "at its line 1"},
		{"missing line", "<!-- example: pkg Example -->\n```go\nx := 1\nif x > 0 {\n\tprintln(x)\n```\n", "at its line 4"},
		{"extra line", "<!-- example: pkg Example -->\n```go\nx := 1\nif x > 0 {\n\tprintln(x)\n}\nx++\n```\n", "at its line 5"},
		{"no such function", "<!-- example: pkg ExampleNone -->\n```go\nx := 1\n```\n", "no function ExampleNone"},
		{"not an example", "<!-- example: pkg helper -->\n```go\n```\n", "neither an Example"},
		{"defined twice", "<!-- example: pkg ExampleTwice -->\n```go\n```\n", "defined 2 times"},
		{"no such dir", "<!-- example: nowhere Example -->\n```go\nx := 1\n```\n", "no _test.go file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must(os.WriteFile(filepath.Join(root, "doc.md"), []byte(tc.md), 0o644))
			_, errs := checkFiles(root, []string{"doc.md"})
			switch {
			case tc.wantErr == "" && len(errs) > 0:
				t.Errorf("want no error, got %q", errs)
			case tc.wantErr != "" && !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, tc.wantErr) }):
				t.Errorf("want an error containing %q, got %q", tc.wantErr, errs)
			}
		})
	}
}
