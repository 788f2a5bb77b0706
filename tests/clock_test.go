package tests

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/tests/internal/servers"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// libfaketime returns the path of libfaketime (Debian: apt-get install
// faketime), skipping t without it, or failing it under
// OUTBOX_REQUIRE_SERVICES=1.
func libfaketime(t *testing.T) string {
	t.Helper()
	for _, p := range []string{
		"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "the clock test needs libfaketime (Debian: apt-get install faketime), which is not installed"
	if os.Getenv(servers.RequireEnv) == "1" {
		t.Fatalf("%s; %s=1 requires it", msg, servers.RequireEnv)
	}
	t.Skip(msg)
	return ""
}

// dbAgo is an SQL expression for the database's now minus d minutes.
func dbAgo(dialect string, minutes int) string {
	if dialect == workload.Postgres {
		return fmt.Sprintf("now() - interval '%d minutes'", minutes)
	}
	return fmt.Sprintf("UTC_TIMESTAMP(6) - INTERVAL %d MINUTE", minutes)
}

// Scenario 8: the database's clock is ten minutes ahead of, or behind, the
// application's (the server runs under libfaketime). Leases, retry
// backoff and retention follow the database clock:
//   - no lease expires early (no event of a live relay is rescued) and the
//     events of a relay killed while holding a batch are rescued once its
//     lease expires (the drain finishes);
//   - a failed attempt is retried after its backoff (2s), not at once;
//   - retention (15 minutes) deletes an event published 20 minutes ago by
//     the database clock and keeps one published 10 minutes ago.
//
// SQLite has no clock of its own (the application's is the database's):
// the scenario does not apply.
func TestClockSkew(t *testing.T) {
	t.Parallel()
	lib := libfaketime(t)
	for _, tc := range []struct {
		dialect string
		skew    string
	}{
		{workload.Postgres, "+10m"}, {workload.Postgres, "-10m"},
		{workload.MySQL, "+10m"}, {workload.MySQL, "-10m"},
	} {
		t.Run(tc.dialect+tc.skew, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, tc.dialect, servers.WithEnv("LD_PRELOAD="+lib, "FAKETIME="+tc.skew))
			var dbNow time.Time
			if err := d.db.Raw("SELECT " + dbAgo(tc.dialect, 0)).Scan(&dbNow).Error; err != nil {
				t.Fatal(err)
			}
			if off := dbNow.Sub(time.Now()); off.Abs() < 9*time.Minute {
				t.Fatalf("the database clock is %v off the application's, want %s", off, tc.skew)
			}
			old, young := retentionEvents(t, d, tc.dialect)

			backoff := 2 * time.Second
			base := workload.RelayConfig{Dialect: tc.dialect, DSN: d.dsn, Lease: 10 * time.Second, Backoff: backoff,
				Retention: 15 * time.Minute, Behavior: workload.Behavior{FailFirstPercent: 10}}
			relays := startFleet(t, d.db, base, 2, 0)
			victim := base
			victim.Name, victim.Lease = "victim", 3*time.Second
			victim.Behavior.Work = 20 * time.Millisecond
			vp := workload.SpawnRelay(t, victim)
			w := workload.StartWriters(d.db, workload.WriterConfig{Pause: 10 * time.Millisecond})
			pause(3 * time.Second)
			heldIDs := freezeHolding(t, d.db, vp) // then killed: it never resumes
			vp.Kill()
			lastFault := time.Now()
			pause(2 * time.Second)
			finish(t, d.db, relays, w, ending{scenario: "database clock " + tc.skew + " off the application's", dialect: tc.dialect,
				transport: workload.Inproc, faults: fmt.Sprintf("clock skew %s; a relay killed holding %d events", tc.skew, len(heldIDs)),
				expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault, drain: 45 * time.Second})

			// Leases: only the killed relay's events were rescued.
			var early int64
			d.db.Raw(`SELECT COUNT(*) FROM outbox_events WHERE last_error LIKE '%lease expired%' AND last_error NOT LIKE '%"victim-%'`).Scan(&early)
			if early > 0 {
				t.Errorf("%d events of live relays were rescued: their lease expired early", early)
			}
			var rescued []int64
			d.db.Raw(`SELECT id FROM outbox_events WHERE last_error LIKE '%lease expired%'`).Scan(&rescued)
			for _, id := range heldIDs {
				if !slices.Contains(rescued, id) {
					t.Errorf("event %d held by the killed relay was not rescued", id)
				}
			}
			checkBackoff(t, relays.calls, d.db, backoff)
			// Retention, by the database clock.
			var left []string
			d.db.Raw(`SELECT event_id FROM outbox_events WHERE event_id IN ?`, []string{old, young}).Scan(&left)
			if slices.Contains(left, old) {
				t.Error("retention kept an event published 20 minutes ago (by the database clock)")
			}
			if !slices.Contains(left, young) {
				t.Error("retention deleted an event published 10 minutes ago (by the database clock)")
			}
		})
	}
}

// retentionEvents writes two events marked published 20 and 10 minutes ago
// by the database clock, and returns their ids.
func retentionEvents(t *testing.T, d *database, dialect string) (old, young string) {
	t.Helper()
	old, young = "old-"+uuid.NewString(), "young-"+uuid.NewString()
	err := d.db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: old, Type: "fault.retention"}, outbox.Event{ID: young, Type: "fault.retention"})
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, ago := range map[string]int{old: 20, young: 10} {
		if err := d.db.Exec(`UPDATE outbox_events SET status = 'published', published_at = `+dbAgo(dialect, ago)+` WHERE event_id = ?`, id).Error; err != nil {
			t.Fatal(err)
		}
	}
	return old, young
}

// checkBackoff verifies that the events whose first attempt failed in an
// in-process relay were retried no sooner than most of the backoff later.
func checkBackoff(t *testing.T, calls *workload.Calls, db *gorm.DB, backoff time.Duration) {
	t.Helper()
	var ids []string
	db.Raw(`SELECT event_id FROM fault_orders`).Scan(&ids)
	checked := 0
	for _, id := range ids {
		if !workload.Chosen(id, 10) {
			continue
		}
		c := calls.Of(id)
		if len(c) < 2 {
			continue // one of its attempts was in the killed relay
		}
		checked++
		if gap := c[1].Sub(c[0]); gap < backoff*3/4 {
			t.Errorf("event %s retried %v after its failed attempt; its backoff is %v", id, gap, backoff)
		}
	}
	if checked < 3 {
		t.Errorf("only %d retried events to check the backoff with", checked)
	}
	t.Logf("backoff respected by %d retried events", checked)
}
