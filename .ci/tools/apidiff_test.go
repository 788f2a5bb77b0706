package tools_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The API check (.ci/apidiff) in a throw-away repository shaped like this
// one: a root module and a module of its own, each tagged on its own.
// Without a tag it passes saying so; with one, a compatible change is
// reported and passes, an incompatible one fails until CHANGELOG.md's
// [Unreleased] lists a breaking change, and a command's (main package's)
// exported names do not count.
func TestAPIDiff(t *testing.T) {
	repo := newRepo(t)

	out, ok := check(t, repo)
	if !ok || !strings.Contains(out, "api: example.com/lib: no release tag (vX.Y.Z) yet: nothing to compare") ||
		!strings.Contains(out, "api: example.com/lib/sub: no release tag (sub/vX.Y.Z) yet") {
		t.Fatalf("without tags: ok %v\n%s", ok, out)
	}

	git(t, repo, "tag", "v0.1.0")
	git(t, repo, "tag", "sub/v0.1.0")
	git(t, repo, "tag", "v0.2.0-rc.1") // a pre-release: not a release
	out, ok = check(t, repo)
	if !ok || !strings.Contains(out, "api: example.com/lib: no exported API change since v0.1.0") ||
		!strings.Contains(out, "api: example.com/lib/sub: no exported API change since sub/v0.1.0") {
		t.Fatalf("unchanged: ok %v\n%s", ok, out)
	}

	// A compatible change, and a command's exported name removed.
	write(t, repo, "lib.go", "package lib\n\nfunc Kept() {}\n\nfunc Gone() {}\n\nfunc Added() {}\n")
	write(t, repo, "cmd/tool/main.go", "package main\n\nfunc main() {}\n")
	commit(t, repo, "compatible")
	out, ok = check(t, repo)
	if !ok || !strings.Contains(out, "api: example.com/lib: exported API changes since v0.1.0:") ||
		!strings.Contains(out, "Added: added") || strings.Contains(out, "Exported") {
		t.Fatalf("a compatible change: ok %v\n%s", ok, out)
	}

	// An incompatible change in the module of its own: refused without a
	// changelog entry, accepted with one.
	write(t, repo, "sub/sub.go", "package sub\n\nfunc Sub(n int) {}\n")
	commit(t, repo, "incompatible")
	out, ok = check(t, repo)
	if ok || !strings.Contains(out, "Sub: changed from func() to func(int)") ||
		!strings.Contains(out, "api: example.com/lib/sub: incompatible changes since sub/v0.1.0, but CHANGELOG.md lists no breaking change") {
		t.Fatalf("an incompatible change without an entry: ok %v\n%s", ok, out)
	}
	write(t, repo, "CHANGELOG.md", changelog("- `sub.Sub` takes a count.\n"))
	commit(t, repo, "changelog")
	if out, ok = check(t, repo); !ok || !strings.Contains(out, "Sub: changed") {
		t.Fatalf("an incompatible change with an entry: ok %v\n%s", ok, out)
	}

	// An entry under a released version does not count for [Unreleased].
	git(t, repo, "tag", "sub/v0.2.0")
	write(t, repo, "sub/sub.go", "package sub\n")
	write(t, repo, "CHANGELOG.md", strings.Replace(changelog(""), "## [0.1.0]", "## [0.2.0]\n\n### Breaking changes\n\n- `sub.Sub` takes a count.\n\n## [0.1.0]", 1))
	commit(t, repo, "removed")
	if out, ok = check(t, repo); ok || !strings.Contains(out, "Sub: removed") {
		t.Fatalf("an incompatible change listed only under a release: ok %v\n%s", ok, out)
	}
}

// newRepo makes a git repository with .ci/apidiff and its tools module,
// a root module (example.com/lib, with a command) and a module of its own
// (sub), committed.
func newRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	for _, f := range []string{"apidiff", "tools/go.mod", "tools/go.sum"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		write(t, repo, filepath.Join(".ci", f), string(b))
	}
	if err := os.Chmod(filepath.Join(repo, ".ci", "apidiff"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, repo, "go.mod", "module example.com/lib\n\ngo 1.26.0\n")
	write(t, repo, "lib.go", "package lib\n\nfunc Kept() {}\n\nfunc Gone() {}\n")
	write(t, repo, "cmd/tool/main.go", "package main\n\nfunc Exported() {}\n\nfunc main() {}\n")
	write(t, repo, "internal/x/x.go", "package x\n\nfunc X() {}\n")
	write(t, repo, "sub/go.mod", "module example.com/lib/sub\n\ngo 1.26.0\n")
	write(t, repo, "sub/sub.go", "package sub\n\nfunc Sub() {}\n")
	write(t, repo, "examples/demo/go.mod", "module example.com/lib/examples/demo\n\ngo 1.26.0\n")
	write(t, repo, "examples/demo/main.go", "package main\n\nfunc main() {}\n")
	write(t, repo, "CHANGELOG.md", changelog(""))
	git(t, repo, "init", "-q")
	commit(t, repo, "first")
	return repo
}

// changelog is a CHANGELOG.md whose [Unreleased] section lists breaking.
func changelog(breaking string) string {
	return "# Changelog\n\n## [Unreleased]\n\n### Breaking changes\n\n" + breaking + "\n## [0.1.0]\n\n- First.\n"
}

// check runs the repository's .ci/apidiff: its output, and whether it
// passed.
func check(t *testing.T, repo string) (string, bool) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repo, ".ci", "apidiff"))
	out, err := cmd.CombinedOutput()
	if _, failed := err.(*exec.ExitError); err != nil && !failed {
		t.Fatal(err)
	}
	t.Logf(".ci/apidiff (passed: %v):\n%s", err == nil, out)
	return string(out), err == nil
}

func commit(t *testing.T, repo, msg string) {
	t.Helper()
	git(t, repo, "add", "-A")
	git(t, repo, "-c", "user.name=ci", "-c", "user.email=ci@example.com", "commit", "-q", "-m", msg)
}

func git(t *testing.T, repo string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func write(t *testing.T, repo, name, content string) {
	t.Helper()
	p := filepath.Join(repo, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
