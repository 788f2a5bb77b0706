package outboxtest

import (
	"fmt"
	"strings"
)

// TB is the part of testing.TB the helpers use. *testing.T, *testing.B and
// *testing.F implement it, and so does any testing.TB; a fake of your own
// lets you test helpers built on this package.
//
// The helpers report a failed assertion with Errorf and then call FailNow
// (a testing.TB stops the test there). They return right after FailNow,
// with a zero value, so that a TB whose FailNow returns sees no further
// effect.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
	Logf(format string, args ...any)
}

// fatal reports msg as a failure and stops the test.
func fatal(t TB, format string, args ...any) {
	t.Helper()
	t.Errorf("%s", fmt.Sprintf(format, args...))
	t.FailNow()
}

// tbWriter writes each line it is given to t.Logf: the relay's log in the
// test's output.
type tbWriter struct{ t TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
