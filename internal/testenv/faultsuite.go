package testenv

import (
	"os"
	"testing"
)

// FaultSuiteEnv turns on the long fault scenarios: the module tests/ and
// tests/walbrokers (run by internal/testrun), and the tests elsewhere
// that start servers of their own and kill, cut or restart them. .ci/run
// sets it; a newcomer's `go run ./internal/testrun` leaves them out and
// says so.
const FaultSuiteEnv = "OUTBOX_FAULT_SUITE"

// FaultSuite reports whether OUTBOX_FAULT_SUITE=1.
func FaultSuite() bool { return os.Getenv(FaultSuiteEnv) == "1" }

// FaultSuiteSkip is the reason a long fault scenario gives when it is
// skipped: one message for all of them, so that testrun counts them on
// one line.
const FaultSuiteSkip = "a long fault scenario (servers of its own, or brokers cut and killed): set " +
	FaultSuiteEnv + "=1 to run it (.ci/run does)"

// LongFault skips t unless OUTBOX_FAULT_SUITE=1: t is a long fault
// scenario, kept out of the everyday run. OUTBOX_REQUIRE_SERVICES does
// not make it run: it needs no server that CI must provide.
func LongFault(t testing.TB) {
	t.Helper()
	if !FaultSuite() {
		t.Skip(FaultSuiteSkip)
	}
}
