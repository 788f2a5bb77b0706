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
// The long fault scenarios run only with OUTBOX_FAULT_SUITE=1, as .ci/run
// sets: the modules tests/ (the fault suite: throw-away servers killed
// and cut, about ten minutes) and tests/walbrokers (WAL mode through
// RabbitMQ and NATS on throw-away PostgreSQL servers), and the tests
// elsewhere that skip with internal/testenv.LongFault.
//
// Arguments are passed to go test (such as -count=1 or -run X). It exits
// with 1 when a test failed, and, under OUTBOX_REQUIRE_SERVICES=1, when
// a test was skipped for want of a server's variable (such a test fails
// itself then; testrun checks it again).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// skipped are the module folders that testrun leaves out (besides .ci,
// CI's own tools): the benchmarks, run on their own.
var skipped = map[string]bool{"bench": true}

// faultEnv turns on the long fault scenarios, among them the modules of
// gated.
const faultEnv = "OUTBOX_FAULT_SUITE"

// requireEnv makes a missing server fail the run (CI sets it).
const requireEnv = "OUTBOX_REQUIRE_SERVICES"

// gated are the modules that run only with OUTBOX_FAULT_SUITE=1, and
// what each is (the reason its skip line gives).
var gated = map[string]string{
	"tests":            "the fault suite (module tests/: throw-away servers killed, frozen and cut, about 10 minutes)",
	"tests/walbrokers": "WAL mode through RabbitMQ and NATS (module tests/walbrokers: throw-away PostgreSQL servers)",
}

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
	total := newReport(os.Stdout, os.Getenv(requireEnv) == "1")
	fault := os.Getenv(faultEnv) == "1"
	var run []string
	for _, m := range mods {
		if what, ok := gated[m]; ok && !fault {
			total.addSkip(what+": set "+faultEnv+"=1 to run it", m+"/...")
			continue
		}
		run = append(run, m)
	}
	// The fault suite's modules last, each alone: their timings are tight.
	slices.SortStableFunc(run, func(a, b string) int { return cmpBool(gated[a] != "", gated[b] != "") })
	fmt.Printf("testrun: go test %s ./... in %d modules, %d at once; long fault scenarios %s\n",
		strings.Join(args, " "), len(run), modulesAtOnce,
		map[bool]string{true: "on", false: "off (" + faultEnv + "=1 turns them on)"}[fault])
	began := time.Now()
	reports, err := testAll(root, run, args, total.required)
	for _, r := range reports {
		total.merge(r)
	}
	if err != nil {
		fatal(err)
	}
	total.summary(time.Since(began))
	if total.failed {
		os.Exit(1)
	}
}

// modulesAtOnce is how many modules are tested at the same time (but the
// fault suite's): their tests wait on timers and servers much of the
// time, which another module's build and tests then use.
const modulesAtOnce = 2

// testAll tests the modules, up to modulesAtOnce at a time but those of
// gated each alone after the others, and returns their reports, in the
// order of mods (gated ones last).
func testAll(root string, mods, args []string, required bool) ([]*report, error) {
	con := newConsole(os.Stdout, len(mods))
	reports := make([]*report, len(mods))
	errs := make([]error, len(mods))
	test := func(i int) {
		reports[i] = newReport(con.slot(i), required)
		errs[i] = reports[i].run(filepath.Join(root, mods[i]), mods[i], args)
		con.finish(i)
	}
	light := 0
	for light < len(mods) && gated[mods[light]] == "" {
		light++
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(modulesAtOnce, light) {
		wg.Go(func() {
			for i := range next {
				test(i)
			}
		})
	}
	for i := range light {
		next <- i
	}
	close(next)
	wg.Wait()
	for i := light; i < len(mods); i++ {
		test(i)
	}
	return reports, errors.Join(errs...)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
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

// run tests the module in dir, printing its packages' lines and go
// test's own messages to r.out.
func (r *report) run(dir, name string, args []string) error {
	fmt.Fprintf(r.out, "# %s\n", map[bool]string{true: "core module", false: "module " + name}[name == "."])
	cmd := exec.Command("go", append([]string{"test", "-json"}, append(args, "./...")...)...)
	cmd.Dir = dir
	cmd.Stderr = r.out
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("go test in %s: %w", name, err)
	}
	r.read(out)
	if err := cmd.Wait(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			return fmt.Errorf("go test in %s: %w", name, err)
		}
		r.failed = true
	}
	return nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testrun:", err)
	os.Exit(2)
}
