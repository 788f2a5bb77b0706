package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// serverVars name the servers of the shared test setup: under
// OUTBOX_REQUIRE_SERVICES=1 a test skipped with a reason naming one of
// them fails the run.
var serverVars = []string{"OUTBOX_POSTGRES_DSN", "OUTBOX_MYSQL_DSN", "OUTBOX_REDIS_ADDR", "OUTBOX_AMQP_URL", "OUTBOX_NATS_URL"}

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
	out      io.Writer
	required bool // OUTBOX_REQUIRE_SERVICES=1
	failed   bool
	skips    map[string][]string // reason → tests
	missing  []string            // skipped for want of a server although required
	pkgs     int
	counts   map[string]int // "pass", "fail", "skip" → tests and subtests
}

func newReport(out io.Writer, required bool) *report {
	return &report{out: out, required: required, skips: map[string][]string{}, counts: map[string]int{}}
}

// skipLine is the message line of a t.Skip: "    file_test.go:12: why".
var skipLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)

// read prints a line per package, the output of failed tests and of
// failed builds, and records the skipped tests with their reasons.
func (r *report) read(in io.Reader) {
	output := map[string][]string{} // package/test → its output lines
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(r.out, sc.Text()) // not go test's JSON: printed as it came
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "output":
			output[key] = append(output[key], strings.TrimRight(e.Output, "\n"))
		case e.Action == "build-output": // a compiler error: the package fails below
			fmt.Fprintln(r.out, strings.TrimRight(e.Output, "\n"))
		case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			r.counts[e.Action]++
			r.testDone(e, output[key])
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			r.packageDone(e, output[key])
		}
	}
}

// testDone records a test's end: a skip with its reason, a failure with
// its output printed.
func (r *report) testDone(e event, output []string) {
	name := e.Package + " " + e.Test
	switch e.Action {
	case "skip":
		reason := reasonOf(output)
		r.addSkip(reason, name)
		if r.required && slices.ContainsFunc(serverVars, func(v string) bool { return strings.Contains(reason, v) }) {
			r.failed = true
			r.missing = append(r.missing, name)
		}
	case "fail":
		r.failed = true
		fmt.Fprintln(r.out, strings.Join(output, "\n"))
	}
}

// packageDone prints a package's line as go test does, and the output of
// a failed package outside its tests (a panic, a timeout, a failed
// build).
func (r *report) packageDone(e event, output []string) {
	r.pkgs++
	r.failed = r.failed || e.Action == "fail"
	took := fmt.Sprintf("%.1fs", e.Elapsed)
	if slices.ContainsFunc(output, func(l string) bool { return strings.HasSuffix(l, "(cached)") }) {
		took = "(cached)"
	}
	fmt.Fprintf(r.out, "%-4s %s\t%s\n", map[string]string{"pass": "ok", "fail": "FAIL", "skip": "?"}[e.Action], e.Package, took)
	if e.Action == "fail" {
		for _, l := range output {
			if !strings.HasPrefix(l, "=== ") {
				fmt.Fprintln(r.out, l)
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

// merge adds what module report o gathered to r.
func (r *report) merge(o *report) {
	r.failed = r.failed || o.failed
	for reason, tests := range o.skips {
		r.skips[reason] = append(r.skips[reason], tests...)
	}
	r.missing = append(r.missing, o.missing...)
	r.pkgs += o.pkgs
	for k, n := range o.counts {
		r.counts[k] += n
	}
}

// printSkips prints the reasons under the title, with how many tests
// gave each, most first.
func (r *report) printSkips(title string, reasons []string) {
	if len(reasons) == 0 {
		return
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if d := len(r.skips[b]) - len(r.skips[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(r.out, "\n%s\n", title)
	for _, k := range reasons {
		fmt.Fprintf(r.out, "  %4d  %s\n", len(r.skips[k]), k)
	}
}

func (r *report) addSkip(reason, test string) { r.skips[reason] = append(r.skips[reason], test) }

// summary prints the skipped tests by reason, most first: those that a
// variable turns on, then those that do not apply here; those skipped
// although every server was required; and the verdict with the tests'
// counts (subtests included).
func (r *report) summary(took time.Duration) {
	var byVar, other []string
	for k := range r.skips {
		if strings.Contains(k, "OUTBOX_") {
			byVar = append(byVar, k)
		} else {
			other = append(other, k)
		}
	}
	r.printSkips("Skipped until a variable is set:", byVar)
	r.printSkips("Skipped where they do not apply:", other)
	if len(r.missing) > 0 {
		fmt.Fprintf(r.out, "\nSkipped for want of a server although %s=1 (each a failure):\n", requireEnv)
		for _, name := range r.missing {
			fmt.Fprintf(r.out, "  %s\n", name)
		}
	}
	verdict := "PASS"
	if r.failed {
		verdict = "FAIL"
	}
	fmt.Fprintf(r.out, "\n%d packages in %s\n", r.pkgs, took.Round(time.Second))
	fmt.Fprintf(r.out, "%s: %d passed, %d failed, %d skipped\n", verdict, r.counts["pass"], r.counts["fail"], r.counts["skip"])
}
