package relay_test

import (
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// set makes the events' rows look as a relay leaves them.
func set(t *testing.T, db *gorm.DB, sql string, ids ...string) {
	t.Helper()
	must(t, db.Exec("UPDATE outbox_events SET "+sql+" WHERE event_id IN ?", ids).Error)
}

func stateOf(t *testing.T, insp *relay.Inspector, id string) relay.EventState {
	t.Helper()
	e, err := insp.GetEvent(t.Context(), id)
	must(t, err)
	return relay.StateOf(e)
}

// ReplayIfUnchanged and RedeliverIfUnchanged change an event only in the
// state given: not once it was claimed again, nor a second time.
func TestResetIfUnchanged(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		emitN(t, db, 3, event)
		set(t, db, "status = 'dead', claim_version = 2", "ev-000000")
		set(t, db, "status = 'published', claim_version = 1", "ev-000001")
		insp := inspector(t, db)
		dead, published := stateOf(t, insp, "ev-000000"), stateOf(t, insp, "ev-000001")
		stale := dead
		stale.ClaimVersion = 1
		for _, c := range []struct {
			name string
			do   func(...relay.EventState) (int64, error)
			s    relay.EventState
			want int64
		}{
			{"replay of another claim", func(s ...relay.EventState) (int64, error) { return insp.ReplayIfUnchanged(ctx, s...) }, stale, 0},
			{"redeliver of a pending event", func(s ...relay.EventState) (int64, error) { return insp.RedeliverIfUnchanged(ctx, s...) }, stateOf(t, insp, "ev-000002"), 0},
			{"replay of a published event", func(s ...relay.EventState) (int64, error) { return insp.ReplayIfUnchanged(ctx, s...) }, published, 0},
			{"replay", func(s ...relay.EventState) (int64, error) { return insp.ReplayIfUnchanged(ctx, s...) }, dead, 1},
			{"replay again", func(s ...relay.EventState) (int64, error) { return insp.ReplayIfUnchanged(ctx, s...) }, dead, 0},
			{"redeliver", func(s ...relay.EventState) (int64, error) { return insp.RedeliverIfUnchanged(ctx, s...) }, published, 1},
			{"redeliver again", func(s ...relay.EventState) (int64, error) { return insp.RedeliverIfUnchanged(ctx, s...) }, published, 0},
		} {
			n, err := c.do(c.s)
			must(t, err)
			if n != c.want {
				t.Errorf("%s: %d changed, want %d", c.name, n, c.want)
			}
		}
		st, err := insp.EventStatuses(ctx, "ev-000000", "ev-000001", "ev-000002")
		must(t, err)
		for id, s := range st {
			if s != outbox.StatusPending {
				t.Errorf("%s is %s, want pending", id, s)
			}
		}
	})
}

// SkipKeyHeadIfUnchanged skips the head confirmed, or nothing.
func TestSkipKeyHeadIfUnchanged(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		emitN(t, db, 2, func(i int) outbox.Event { e := event(i); e.PartitionKey = "k"; return e })
		set(t, db, "status = 'failed', claim_version = 1", "ev-000000")
		insp := inspector(t, db)
		head := stateOf(t, insp, "ev-000000")
		set(t, db, "status = 'published', claim_version = 2", "ev-000000")
		set(t, db, "status = 'failed', claim_version = 1", "ev-000001")
		if _, err := insp.SkipKeyHeadIfUnchanged(ctx, "k", head); !errors.Is(err, relay.ErrChanged) {
			t.Errorf("skipping a head delivered since: %v, want ErrChanged", err)
		}
		next := stateOf(t, insp, "ev-000001")
		if next.Status != outbox.StatusFailed {
			t.Fatalf("the new head is %s", next.Status)
		}
		id, err := insp.SkipKeyHeadIfUnchanged(ctx, "k", next)
		if err != nil || id != "ev-000001" {
			t.Errorf("skipping the confirmed head: %q, %v", id, err)
		}
		if _, err := insp.SkipKeyHeadIfUnchanged(ctx, "k", next); !errors.Is(err, relay.ErrChanged) {
			t.Errorf("skipping it again: %v, want ErrChanged", err)
		}
	})
}

// ReplayAllIfUnchanged replays the confirmed dead set, or nothing when
// an event of it changed or another one died.
func TestReplayAllIfUnchanged(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		emitN(t, db, 4, event)
		set(t, db, "status = 'dead', claim_version = 3", "ev-000000", "ev-000001")
		insp := inspector(t, db)
		confirmed, err := insp.DeadSetOf(ctx, relay.Filter{})
		must(t, err)
		if confirmed.Count != 2 || len(confirmed.Digest) != 32 {
			t.Fatalf("dead set %+v", confirmed)
		}
		set(t, db, "status = 'dead', claim_version = 1", "ev-000002") // another dies
		if n, err := insp.ReplayAllIfUnchanged(ctx, relay.Filter{}, confirmed); !errors.Is(err, relay.ErrChanged) || n != 0 {
			t.Errorf("a set one larger: %d, %v; want 0, ErrChanged", n, err)
		}
		set(t, db, "status = 'pending'", "ev-000002")
		set(t, db, "claim_version = 4", "ev-000001") // died again
		if n, err := insp.ReplayAllIfUnchanged(ctx, relay.Filter{}, confirmed); !errors.Is(err, relay.ErrChanged) || n != 0 {
			t.Errorf("a set whose event died again: %d, %v; want 0, ErrChanged", n, err)
		}
		set(t, db, "claim_version = 3", "ev-000001")
		if n, err := insp.ReplayAllIfUnchanged(ctx, relay.Filter{}, confirmed); err != nil || n != 2 {
			t.Errorf("the confirmed set: %d, %v; want 2", n, err)
		}
		if n, err := insp.ReplayAllIfUnchanged(ctx, relay.Filter{}, confirmed); !errors.Is(err, relay.ErrChanged) || n != 0 {
			t.Errorf("again: %d, %v; want 0, ErrChanged", n, err)
		}
	})
}

// PurgePublishedBefore deletes what was published before the instant
// only; Now is the database clock.
func TestPurgePublishedBefore(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		insp := inspector(t, db)
		now, err := insp.Now(ctx)
		must(t, err)
		if d := time.Since(now); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("Now %v is %v away from this process's clock", now, d)
		}
		publishBurst(t, db, "p", 10, now.Add(-10*time.Minute), now.Add(-time.Minute), 0)
		n, err := insp.PurgePublishedBefore(ctx, now.Add(-5*time.Minute))
		must(t, err)
		left, err := insp.CountEvents(ctx, relay.EventQuery{Status: outbox.StatusPublished})
		must(t, err)
		if n != 6 || left != 4 {
			t.Errorf("deleted %d, left %d; want 6 published before the instant deleted, 4 left", n, left)
		}
	})
}
