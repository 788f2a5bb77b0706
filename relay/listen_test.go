package relay_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// wrappedPgx stands for an instrumenting driver wrapper (otelsql,
// sqlhooks): its connections are not *stdlib.Conn, so LISTEN cannot work.
type wrappedPgx struct{ claims *atomic.Int64 }

func (d wrappedPgx) Open(name string) (driver.Conn, error) {
	c, err := stdlib.GetDefaultDriver().Open(name)
	if err != nil {
		return nil, err
	}
	return &wrappedConn{c.(*stdlib.Conn), d.claims}, nil
}

type wrappedConn struct {
	*stdlib.Conn
	claims *atomic.Int64
}

func (c *wrappedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.Contains(q, "SET status = 'publishing'") {
		c.claims.Add(1)
	}
	return c.Conn.QueryContext(ctx, q, args)
}

var registerWrapped sync.Once

// Without LISTEN the relay polls: it must not spin.
func TestNoListenWithAWrappedDriverPolls(t *testing.T) {
	dsn := testenv.DSN(t, testenv.Postgres)
	claims := &atomic.Int64{}
	registerWrapped.Do(func() { sql.Register("outbox-wrapped-pgx", wrappedPgx{claims}) })
	sqlDB, err := sql.Open("outbox-wrapped-pgx", dsn)
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), testenv.Config())
	must(t, err)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))

	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	must(t, newRelay(t, db, newRecorder(), relay.WithPollInterval(time.Second)).Start(ctx))
	if n := claims.Load(); n == 0 || n > 6 {
		t.Errorf("%d claims on an empty table in 1.5s with a 1s poll interval", n)
	}
}
