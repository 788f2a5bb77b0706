package testenv_test

import (
	"testing"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// LongFault skips unless OUTBOX_FAULT_SUITE=1, with a reason that names
// the variable (testrun groups the skips by it).
func TestLongFaultRunsOnlyInTheFaultSuite(t *testing.T) {
	for _, v := range []string{"", "0", "1"} {
		t.Run("OUTBOX_FAULT_SUITE="+v, func(t *testing.T) {
			t.Setenv(testenv.FaultSuiteEnv, v)
			ran := false
			inner := t.Run("scenario", func(t *testing.T) {
				testenv.LongFault(t)
				ran = true
			})
			if want := v == "1"; ran != want || !inner {
				t.Errorf("ran=%v (want %v), passed or skipped=%v", ran, want, inner)
			}
		})
	}
}
