package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// singleRelay is a relay run WithSingleActive by the test, with a
// publisher of its own to tell its deliveries apart.
type singleRelay struct {
	id     string
	pub    *recorder
	cancel context.CancelFunc
	done   chan error
}

func startSingle(t *testing.T, db *gorm.DB, id string) *singleRelay {
	t.Helper()
	s := &singleRelay{id: id, pub: newRecorder(), done: make(chan error, 1)}
	r := newRelay(t, db, s.pub, relay.WithWorkerID(id), relay.WithSingleActive(),
		relay.WithPollInterval(50*time.Millisecond), relay.WithHeartbeat(100*time.Millisecond))
	var ctx context.Context
	ctx, s.cancel = context.WithCancel(context.Background())
	go func() { s.done <- r.Start(ctx) }()
	t.Cleanup(s.stop)
	return s
}

// stop stops the relay, if it runs, and waits for Start to return.
func (s *singleRelay) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	s.cancel = nil
}

// waitUntil fails the test unless cond holds within 20s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// roles returns the live relays' roles by id, from Inspector.Relays.
func roles(t *testing.T, db *gorm.DB) map[string]string {
	t.Helper()
	rs, err := inspector(t, db).Relays(context.Background())
	must(t, err)
	out := map[string]string{}
	for _, r := range rs {
		if r.Live {
			out[r.ID] = r.Role
		}
	}
	return out
}

func hasRoles(t *testing.T, db *gorm.DB, want map[string]string) func() bool {
	return func() bool { return fmt.Sprint(roles(t, db)) == fmt.Sprint(want) }
}

// emitRange emits the events from..to-1 and waits until they are
// published.
func emitRange(t *testing.T, db *gorm.DB, from, to int) {
	t.Helper()
	emitN(t, db, to-from, func(i int) outbox.Event { return event(from + i) })
	waitUntil(t, "the events published", func() bool { return countStatus(t, db, outbox.StatusPublished) == int64(to) })
}

// lockHolder returns the session holding the table's single-active
// lock, found by the lock (0: none).
func lockHolder(t *testing.T, db *gorm.DB) int64 {
	t.Helper()
	var id *int64
	switch db.Dialector.Name() {
	case "postgres":
		must(t, db.Raw(`WITH k AS (SELECT hashtextextended(current_schema() || '.' || 'gorm-outbox:' || ?, 0) AS key)
			SELECT l.pid FROM pg_locks l, k WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid`,
			outbox.DefaultTableName).Scan(&id).Error)
	case "mysql":
		must(t, db.Raw("SELECT IS_USED_LOCK(CONCAT('gorm-outbox:', MD5(CONCAT(DATABASE(), '.', 'gorm-outbox:', ?))))",
			outbox.DefaultTableName).Scan(&id).Error)
	}
	if id == nil {
		return 0
	}
	return *id
}

// kill ends the database session id, as a crash of its process would.
func kill(t *testing.T, db *gorm.DB, id int64) {
	t.Helper()
	if db.Dialector.Name() == "postgres" {
		must(t, db.Exec("SELECT pg_terminate_backend(?)", id).Error)
		return
	}
	must(t, db.Exec(fmt.Sprintf("KILL %d", id)).Error)
}

// With WithSingleActive, of two relays of one table one claims and the
// other stands by, as their heartbeats say; when the active one dies (its
// lock session killed) the standby takes over; when an active relay's
// lock connection breaks, it stops claiming and one relay (itself or a
// standby) takes the lock again. SQLite needs no lock: always active.
func TestSingleActive(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		a := startSingle(t, db, "relay-a")
		waitUntil(t, "relay-a active", hasRoles(t, db, map[string]string{"relay-a": relay.RoleActive}))
		if db.Dialector.Name() == "sqlite" {
			emitRange(t, db, 0, 20)
			if a.pub.delivered() != 20 {
				t.Fatalf("relay-a delivered %d events, want 20", a.pub.delivered())
			}
			return
		}
		b := startSingle(t, db, "relay-b")
		waitUntil(t, "relay-b standby", hasRoles(t, db, map[string]string{"relay-a": relay.RoleActive, "relay-b": relay.RoleStandby}))
		emitRange(t, db, 0, 50)
		if a.pub.delivered() != 50 || b.pub.delivered() != 0 {
			t.Fatalf("delivered by the active relay %d, by the standby %d: want 50 and 0", a.pub.delivered(), b.pub.delivered())
		}

		// The active relay dies: its lock session ends, then it stops.
		held := lockHolder(t, db)
		if held == 0 {
			t.Fatal("no session holds the lock")
		}
		kill(t, db, held)
		a.stop()
		waitUntil(t, "relay-b active", hasRoles(t, db, map[string]string{"relay-b": relay.RoleActive}))
		emitRange(t, db, 50, 100)
		if a.pub.delivered() != 50 || b.pub.delivered() != 50 {
			t.Fatalf("after failover, delivered by relay-a %d, by relay-b %d: want 50 and 50", a.pub.delivered(), b.pub.delivered())
		}

		// The active relay's lock connection breaks while it runs: it stops
		// claiming, and one relay takes the lock again.
		c := startSingle(t, db, "relay-c")
		waitUntil(t, "relay-c standby", hasRoles(t, db, map[string]string{"relay-b": relay.RoleActive, "relay-c": relay.RoleStandby}))
		held = lockHolder(t, db)
		kill(t, db, held)
		waitUntil(t, "the lock taken again", func() bool { h := lockHolder(t, db); return h != 0 && h != held })
		waitUntil(t, "one relay active", func() bool {
			r := roles(t, db)
			return len(r) == 2 && r["relay-b"] != r["relay-c"]
		})
		bBefore, cBefore := b.pub.delivered(), c.pub.delivered()
		emitRange(t, db, 100, 150)
		nb, nc := b.pub.delivered()-bBefore, c.pub.delivered()-cBefore
		if nb+nc != 50 || (nb != 0 && nc != 0) {
			t.Fatalf("after the lock connection broke, relay-b delivered %d and relay-c %d: want 50 by one of them", nb, nc)
		}
		if roles(t, db)["relay-b"] == relay.RoleActive && nb != 50 || roles(t, db)["relay-c"] == relay.RoleActive && nc != 50 {
			t.Fatalf("the relay that delivers is not the one recorded active: %v", roles(t, db))
		}
	})
}
