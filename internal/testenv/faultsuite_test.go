package testenv_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// skipRecorder is a testing.TB whose Skip records its reason instead of
// ending the test (which testrun would then count as a skipped scenario).
type skipRecorder struct {
	testing.TB
	skipped string
}

func (r *skipRecorder) Helper()          {}
func (r *skipRecorder) Skip(args ...any) { r.skipped = fmt.Sprint(args...) }

// LongFault skips unless OUTBOX_FAULT_SUITE=1, with a reason that names
// the variable (testrun groups the skips by it).
func TestLongFaultRunsOnlyInTheFaultSuite(t *testing.T) {
	for _, v := range []string{"", "0", "1"} {
		t.Setenv(testenv.FaultSuiteEnv, v)
		r := &skipRecorder{TB: t}
		testenv.LongFault(r)
		if skipped := r.skipped != ""; skipped != (v != "1") {
			t.Errorf("%s=%q: skipped=%v (%q)", testenv.FaultSuiteEnv, v, skipped, r.skipped)
		}
		if r.skipped != "" && !strings.Contains(r.skipped, testenv.FaultSuiteEnv+"=1") {
			t.Errorf("the reason %q does not name %s=1", r.skipped, testenv.FaultSuiteEnv)
		}
	}
}
