// Package outboxtestenv is what the tests of outboxtest and of the modules
// that use outboxtest.DB share: outboxtest.DB on the servers of
// internal/testenv's variables, under its rule (skip without a variable,
// fail with OUTBOX_REQUIRE_SERVICES=1), and a TestMain for packages whose
// examples call outboxtest.DB with a zero testing.T.
package outboxtestenv

import (
	"fmt"
	"os"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/outboxtest"
)

// DB is outboxtest.DB(t, opts...) on the dialect (testenv.SQLite,
// Postgres or MySQL), on the server of its testenv variable: skipped, or
// failed with OUTBOX_REQUIRE_SERVICES=1, when the variable is not set.
func DB(t testing.TB, dialect string, opts ...outboxtest.DBOption) *gorm.DB {
	t.Helper()
	return outboxtest.DB(t, append([]outboxtest.DBOption{Option(t, dialect)}, opts...)...)
}

// Option is the outboxtest.DB option of the dialect, on the server of its
// testenv variable.
func Option(t testing.TB, dialect string) outboxtest.DBOption {
	t.Helper()
	switch dialect {
	case testenv.Postgres:
		return outboxtest.Postgres(testenv.BaseDSN(t, dialect))
	case testenv.MySQL:
		return outboxtest.MySQL(testenv.BaseDSN(t, dialect))
	}
	return outboxtest.SQLite()
}

// Main runs the tests and examples of m with a temporary directory of
// their own (GOTMPDIR) that it removes at the end, and exits: an
// example's zero testing.T never runs its cleanups, so the SQLite files
// that outboxtest.DB makes in its TempDir would stay behind.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("GOTMPDIR", dir) // where TempDir makes its directories
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
