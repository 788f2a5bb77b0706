package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func TestGetEvent(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, func(int) outbox.Event {
			return outbox.Event{ID: "ev-1", Type: "order.created", PartitionKey: "order:1", Topic: "orders",
				Payload: map[string]any{"total": 42}, Headers: map[string]string{"h": "v"}, MaxAttempts: 3}
		})
		e, err := inspector(t, db).GetEvent(t.Context(), "ev-1")
		must(t, err)
		var payload map[string]any
		must(t, json.Unmarshal(e.Payload, &payload))
		if e.EventID != "ev-1" || e.Type != "order.created" || e.Status != outbox.StatusPending || e.PartitionKey != "order:1" ||
			e.Topic != "orders" || e.MaxAttempts != 3 || payload["total"] != float64(42) || string(e.Headers) != `{"h":"v"}` ||
			e.CreatedAt.IsZero() || e.AvailableAt.IsZero() {
			t.Errorf("GetEvent: %+v, payload %s", e, e.Payload)
		}
		if _, err := inspector(t, db).GetEvent(t.Context(), "no-such-event"); !errors.Is(err, relay.ErrEventNotFound) {
			t.Errorf("a missing event: %v, want ErrEventNotFound", err)
		}
	})
}

// Redeliver returns published and dead events to pending, and touches
// nothing else: not a publishing event, not a pending one.
func TestRedeliver(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		emitN(t, db, 2, event) // ev-000000, ev-000001: published
		_, err := newRelay(t, db, newRecorder()).RunOnce(ctx)
		must(t, err)
		emitN(t, db, 5, func(i int) outbox.Event { return event(i + 2) })
		must(t, db.Exec("UPDATE outbox_events SET status = 'dead', attempts = 3, last_error = 'boom' WHERE event_id = 'ev-000002'").Error)
		must(t, db.Exec("UPDATE outbox_events SET status = 'publishing', attempts = 1, locked_by = 'other' WHERE event_id = 'ev-000003'").Error)
		must(t, db.Exec("UPDATE outbox_events SET status = 'failed', attempts = 1, last_error = 'flaky' WHERE event_id = 'ev-000004'").Error)

		ids := []string{"ev-000000", "ev-000001", "ev-000002", "ev-000003", "ev-000004", "ev-000005", "missing"}
		st, err := inspector(t, db).EventStatuses(ctx, ids...)
		must(t, err)
		want := map[string]outbox.Status{"ev-000000": outbox.StatusPublished, "ev-000001": outbox.StatusPublished,
			"ev-000002": outbox.StatusDead, "ev-000003": outbox.StatusPublishing, "ev-000004": outbox.StatusFailed, "ev-000005": outbox.StatusPending}
		if len(st) != len(want) {
			t.Errorf("EventStatuses: %v, want %v", st, want)
		}
		for id, s := range want {
			if st[id] != s {
				t.Errorf("EventStatuses[%s] = %q, want %q", id, st[id], s)
			}
		}

		n, err := inspector(t, db).Redeliver(ctx, ids...)
		must(t, err)
		if n != 3 {
			t.Errorf("redelivered %d, want 3 (2 published, 1 dead)", n)
		}
		for _, id := range []string{"ev-000000", "ev-000001", "ev-000002"} {
			row := statusOf(t, db, id)
			if row.Status != outbox.StatusPending || row.Attempts != 0 || row.LastError != nil || row.LockedBy != nil || row.PublishedAt != nil {
				t.Errorf("redelivered %s: %+v", id, row)
			}
		}
		if row := statusOf(t, db, "ev-000003"); row.Status != outbox.StatusPublishing || row.Attempts != 1 || row.LockedBy == nil {
			t.Errorf("a publishing event was touched: %+v", row)
		}
		if row := statusOf(t, db, "ev-000004"); row.Status != outbox.StatusFailed || row.LastError == nil {
			t.Errorf("a failed event was touched: %+v", row)
		}

		// They are delivered again.
		pub := newRecorder()
		_, err = newRelay(t, db, pub).RunOnce(ctx)
		must(t, err)
		for _, id := range []string{"ev-000000", "ev-000001", "ev-000002"} {
			if pub.count[id] != 1 {
				t.Errorf("%s delivered %d times after its redelivery, want 1", id, pub.count[id])
			}
		}
	})
}

// describedPublisher says where it delivers.
type describedPublisher struct{ *recorder }

func (describedPublisher) Describe() string { return "test queue q1" }

// Heartbeats record each relay's publisher, and GetStats shows it, also
// for a table whose name has capitals (PostgreSQL folds it).
func TestHeartbeatRecordsPublisher(t *testing.T) {
	for _, table := range []string{"", "OrderEvents"} {
		t.Run("table="+table, func(t *testing.T) {
			testenv.Each(t, func(t *testing.T, db *gorm.DB) {
				must(t, db.Use(&outbox.Plugin{TableName: table, AutoMigrate: true}))
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{}, 2)
				for i, pub := range []relay.Publisher{describedPublisher{newRecorder()}, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })} {
					r := newRelay(t, db, pub, relay.WithHeartbeat(100*time.Millisecond), relay.WithWorkerID([]string{"a", "b"}[i]))
					go func() { _ = r.Start(ctx); done <- struct{}{} }()
				}
				defer func() { cancel(); <-done; <-done }()
				deadline := time.Now().Add(30 * time.Second)
				for {
					s, err := inspector(t, db).GetStats(ctx)
					must(t, err)
					if len(s.Relays) == 2 {
						if got := s.Relays[0]; got.ID != "a" || got.Publisher != "test queue q1" || got.Heartbeat != 100*time.Millisecond || !got.Live {
							t.Errorf("relay a: %+v", got)
						}
						if got := s.Relays[1]; got.ID != "b" || got.Publisher != "relay.PublisherFunc" {
							t.Errorf("relay b: %+v", got)
						}
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("GetStats lists %d relays after 30s, want 2: %+v", len(s.Relays), s.Relays)
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		})
	}
}

// A relays table from before the publisher column is still read, and
// outbox.Migrate adds the column once.
func TestRelaysTableUpgrade(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Exec("ALTER TABLE outbox_events_relays DROP COLUMN publisher").Error)
		must(t, db.Exec("DELETE FROM gorm_outbox_migrations WHERE name = '0004_outbox_relays_publisher'").Error)
		must(t, db.Exec("INSERT INTO outbox_events_relays (id, host, pid, heartbeat_ms, started_at, last_beat) VALUES ('old', 'h', 1, 1000, ?, ?)",
			agoText(db, time.Minute), agoText(db, time.Minute)).Error)
		s, err := inspector(t, db).GetStats(t.Context())
		must(t, err)
		if len(s.Relays) != 1 || s.Relays[0].ID != "old" || s.Relays[0].Publisher != "" || s.Relays[0].Live {
			t.Errorf("relays of an old table: %+v", s.Relays)
		}
		must(t, outbox.Migrate(db))
		must(t, outbox.Migrate(db)) // recorded: not applied twice
		must(t, db.Exec("UPDATE outbox_events_relays SET publisher = 'p' WHERE id = 'old'").Error)
		s, err = inspector(t, db).GetStats(t.Context())
		must(t, err)
		if len(s.Relays) != 1 || s.Relays[0].Publisher != "p" {
			t.Errorf("relays after the upgrade: %+v", s.Relays)
		}
	})
}
