// Command testrun runs every test of the repository, as the README says:
//
//	go run ./internal/testrun
//
// It runs `go test -race ./...` (without -race when cgo is off) in the
// core module and in each module of its own (the broker adapters, the CLI,
// outboxprom, the admin page's browser tests), prints a line per package
// as go test does, the output of what failed, and then what was skipped
// and why, grouped by reason: a test that needs a server is skipped with
// a message naming the variable that points it there (README, "Tests"),
// and a plain `go test` would not say so.
//
// The fault suite (module tests/: throw-away servers killed and cut, about
// ten minutes) runs only with OUTBOX_FAULT_SUITE=1, as .ci/run sets.
// Arguments are passed to go test (such as -count=1 or -run X). It exits
// with 1 when a test failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// skipped are the module folders that testrun leaves out (besides .ci,
// CI's own tools): the benchmarks, run on their own.
var skipped = map[string]bool{"bench": true}

// faultEnv turns on the fault suite (module tests/).
const faultEnv = "OUTBOX_FAULT_SUITE"

func main() {
	root, err := repoRoot()
	if err != nil {
		fatal(err)
	}
	mods, err := modules(root)
	if err != nil {
		fatal(err)
	}
	args := append(raceFlag(), os.Args[1:]...)
	r := &report{skips: map[string][]string{}}
	began := time.Now()
	for _, m := range mods {
		if m == "tests" && os.Getenv(faultEnv) != "1" {
			r.addSkip("the fault suite (module tests/, about 10 minutes): set "+faultEnv+"=1", "tests/...")
			continue
		}
		if err := r.run(filepath.Join(root, m), m, args); err != nil {
			fatal(err)
		}
	}
	r.summary(time.Since(began))
	if r.failed {
		os.Exit(1)
	}
}

// repoRoot is the folder of the core module: this command's own module.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/gormoutbox/outbox").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository (run this from inside it): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// modules lists the folders of the repository's modules, relative to
// root, the core module (".") first.
func modules(root string) ([]string, error) {
	var mods []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && (d.Name() == ".git" || d.Name() == ".ci" || d.Name() == "testdata" || d.Name() == "node_modules" || skipped[rel]):
			return filepath.SkipDir
		case !d.IsDir() && d.Name() == "go.mod":
			mods = append(mods, filepath.ToSlash(filepath.Dir(rel)))
		}
		return nil
	})
	sort.Slice(mods, func(i, j int) bool { return mods[i] == "." || mods[j] != "." && mods[i] < mods[j] })
	return mods, err
}

// raceFlag is -race where the race detector can run (cgo on).
func raceFlag() []string {
	out, err := exec.Command("go", "env", "CGO_ENABLED").Output()
	if err == nil && strings.TrimSpace(string(out)) == "1" {
		return []string{"-race"}
	}
	return nil
}

// event is one line of go test -json.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// report gathers what the runs said.
type report struct {
	failed bool
	skips  map[string][]string // reason → tests
	pkgs   int
}

// run tests the module in dir and prints its packages' lines.
func (r *report) run(dir, name string, args []string) error {
	fmt.Printf("# %s\n", map[bool]string{true: "core module", false: "module " + name}[name == "."])
	cmd := exec.Command("go", append([]string{"test", "-json"}, append(args, "./...")...)...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	r.read(out)
	if err := cmd.Wait(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			return err
		}
		r.failed = true
	}
	return nil
}

// skipLine is the message line of a t.Skip: "    file_test.go:12: why".
var skipLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)

// read prints a line per package, the output of failed tests, and records
// the skipped tests with their reasons.
func (r *report) read(in io.Reader) {
	output := map[string][]string{} // package/test → its output lines
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Println(sc.Text()) // a build error, printed as it came
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "output":
			output[key] = append(output[key], strings.TrimRight(e.Output, "\n"))
		case e.Action == "skip" && e.Test != "":
			r.addSkip(reasonOf(output[key]), e.Package+" "+e.Test)
		case e.Action == "fail" && e.Test != "":
			r.failed = true
			fmt.Println(strings.Join(output[key], "\n"))
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			r.pkgs++
			r.failed = r.failed || e.Action == "fail"
			took := fmt.Sprintf("%.1fs", e.Elapsed)
			if slices.ContainsFunc(output[key], func(l string) bool { return strings.HasSuffix(l, "(cached)") }) {
				took = "(cached)"
			}
			fmt.Printf("%-4s %s\t%s\n", map[string]string{"pass": "ok", "fail": "FAIL", "skip": "?"}[e.Action], e.Package, took)
			if e.Action == "fail" {
				for _, l := range output[key] {
					if !strings.HasPrefix(l, "=== ") {
						fmt.Println(l)
					}
				}
			}
		}
	}
}

// reasonOf is the message of a skipped test's output.
func reasonOf(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := skipLine.FindStringSubmatch(lines[i]); m != nil {
			return m[1]
		}
	}
	return "(no reason given)"
}

func (r *report) addSkip(reason, test string) { r.skips[reason] = append(r.skips[reason], test) }

// summary prints the skipped tests by reason, most first, and the verdict.
func (r *report) summary(took time.Duration) {
	reasons := make([]string, 0, len(r.skips))
	for k := range r.skips {
		reasons = append(reasons, k)
	}
	slices.SortFunc(reasons, func(a, b string) int { return len(r.skips[b]) - len(r.skips[a]) })
	if len(reasons) > 0 {
		fmt.Println("\nSkipped, by reason:")
	}
	for _, k := range reasons {
		tests := r.skips[k]
		fmt.Printf("  %4d  %s\n", len(tests), k)
	}
	verdict := "PASS"
	if r.failed {
		verdict = "FAIL"
	}
	fmt.Printf("\n%s: %d packages in %s\n", verdict, r.pkgs, took.Round(time.Second))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testrun:", err)
	os.Exit(2)
}
