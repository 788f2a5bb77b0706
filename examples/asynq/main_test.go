package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// The example runs end to end against the Redis of OUTBOX_REDIS_ADDR, on
// its default SQLite database and on PostgreSQL.
func TestExample(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for _, dialect := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(dialect, func(t *testing.T) {
			var out bytes.Buffer
			cfg := config{redis: addr, queue: testenv.Name("oa-example"), orders: 30, timeout: 45 * time.Second, out: &out}
			if dialect == testenv.Postgres {
				cfg.dsn = testenv.DSN(t, testenv.Postgres)
			}
			if err := run(t.Context(), cfg); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			t.Log("\n" + out.String())
			for _, want := range []string{"orders committed:          24 (rolled back: 6)", "events written:            24", "shipments:                 24 for 24 distinct orders", "exactly once"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("summary lacks %q", want)
				}
			}
		})
	}
}
