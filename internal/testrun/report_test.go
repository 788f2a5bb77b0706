package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// stream is go test -json of a package that does not build (bf/a) and one
// with a skipped test, a test skipped for want of PostgreSQL, and a
// failed subtest (bf/b), as go 1.26 writes it (times left out).
const stream = `{"ImportPath":"bf/a [bf/a.test]","Action":"build-output","Output":"# bf/a [bf/a.test]\n"}
{"ImportPath":"bf/a [bf/a.test]","Action":"build-output","Output":"a/a.go:1:34: cannot use \"x\" (untyped string constant) as int value in return statement\n"}
{"ImportPath":"bf/a [bf/a.test]","Action":"build-fail"}
{"Action":"start","Package":"bf/a"}
{"Action":"output","Package":"bf/a","Output":"FAIL\tbf/a [build failed]\n"}
{"Action":"fail","Package":"bf/a","Elapsed":0,"FailedBuild":"bf/a [bf/a.test]"}
{"Action":"run","Package":"bf/b","Test":"TestB"}
{"Action":"output","Package":"bf/b","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"bf/b","Test":"TestB","Output":"    b_test.go:3: why not\n"}
{"Action":"output","Package":"bf/b","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"bf/b","Test":"TestB","Elapsed":0}
{"Action":"output","Package":"bf/b","Test":"TestPG","Output":"    b_test.go:9: OUTBOX_POSTGRES_DSN is not set; set it to run this test\n"}
{"Action":"skip","Package":"bf/b","Test":"TestPG","Elapsed":0}
{"Action":"output","Package":"bf/b","Test":"TestD","Output":"=== RUN   TestD\n"}
{"Action":"pass","Package":"bf/b","Test":"TestD","Elapsed":0}
{"Action":"output","Package":"bf/b","Test":"TestC/s","Output":"    b_test.go:4: boom\n"}
{"Action":"fail","Package":"bf/b","Test":"TestC/s","Elapsed":0}
{"Action":"fail","Package":"bf/b","Test":"TestC","Elapsed":0}
{"Action":"output","Package":"bf/b","Output":"FAIL\tbf/b\t0.004s\n"}
{"Action":"fail","Package":"bf/b","Elapsed":0.005}
`

func TestReportSaysWhatFailedAndWhatWasSkipped(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out, false)
	r.read(strings.NewReader(stream))
	r.summary(2 * time.Second)
	got := out.String()
	for _, want := range []string{
		"a/a.go:1:34: cannot use", // the compiler's error
		"FAIL bf/a\t0.0s",         // the package's line
		"    b_test.go:4: boom",   // the failed subtest's output
		"     1  why not\n",       // a reason and how many tests gave it
		"     1  OUTBOX_POSTGRES_DSN is not set",
		"FAIL: 1 passed, 2 failed, 2 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if !r.failed {
		t.Error("a failed test and a failed build did not fail the run")
	}
	if strings.Contains(got, "although") {
		t.Errorf("a server's skip was called a failure without %s=1:\n%s", requireEnv, got)
	}
}

func TestReportFailsASkipForAMissingServerWhenRequired(t *testing.T) {
	skips := `{"Action":"output","Package":"p","Test":"TestPG","Output":"    x_test.go:9: OUTBOX_POSTGRES_DSN is not set; set it to run this test\n"}
{"Action":"skip","Package":"p","Test":"TestPG","Elapsed":0}
{"Action":"output","Package":"p","Test":"TestSQLite","Output":"    x_test.go:12: SQLite has one writer\n"}
{"Action":"skip","Package":"p","Test":"TestSQLite","Elapsed":0}
{"Action":"pass","Package":"p","Elapsed":0.1}
`
	for _, required := range []bool{false, true} {
		var out bytes.Buffer
		r := newReport(&out, required)
		r.read(strings.NewReader(skips))
		r.summary(time.Second)
		if r.failed != required {
			t.Errorf("required=%v: failed=%v after a test skipped for want of PostgreSQL", required, r.failed)
		}
		if required && (!slices.Equal(r.missing, []string{"p TestPG"}) || !strings.Contains(out.String(), "although "+requireEnv+"=1")) {
			t.Errorf("required: missing=%q, report:\n%s", r.missing, out.String())
		}
	}
}

func TestModulesCoreFirstWithoutBenchOrCI(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{".", "b", "a/x", "bench", ".ci/tools", "a/testdata/m"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "go.mod"), []byte("module m\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := modules(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".", "a/x", "b"}; !slices.Equal(got, want) {
		t.Errorf("modules = %q, want %q", got, want)
	}
}
