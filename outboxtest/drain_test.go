package outboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/outboxtest"
	"github.com/gormoutbox/outbox/relay"
)

// Drain runs the handlers of every event, those the handlers emit too, on
// a table of a custom name (mixed case: PostgreSQL folds it).
func TestDrain(t *testing.T) {
	eachDB(t, "OrderEvents", func(t *testing.T, db *gorm.DB) {
		var mu sync.Mutex
		var handled []string
		mux := newMux(t, db)
		must(t, mux.HandleTx("order.created", "invoice", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			mu.Lock()
			handled = append(handled, e.Type+" "+e.AggregateID)
			mu.Unlock()
			return outbox.Emit(tx, outbox.Event{Type: "invoice.issued", AggregateType: "invoice", AggregateID: e.AggregateID})
		}))
		must(t, mux.HandleFunc("invoice.issued", "mail", func(ctx context.Context, e *outbox.Envelope) error {
			mu.Lock()
			handled = append(handled, e.Type+" "+e.AggregateID)
			mu.Unlock()
			return nil
		}))
		var orders []string
		for _, c := range []string{"ada", "bob", "ada"} {
			orders = append(orders, fmt.Sprint(createOrder(t, db, c, 1).ID))
		}

		ft := &fakeT{}
		res := outboxtest.Drain(ft, db, mux)
		ft.requirePassed(t)
		if res != (relay.Result{Claimed: 6, Published: 6}) {
			t.Errorf("result %+v, want 6 claimed and published", res)
		}
		// One at a time: the events of a partition key (the customer) in
		// commit order, the keys' runs by their first event. The invoices
		// were emitted in the order their orders were handled.
		want := []string{"order.created " + orders[0], "order.created " + orders[2], "order.created " + orders[1],
			"invoice.issued " + orders[0], "invoice.issued " + orders[2], "invoice.issued " + orders[1]}
		if !slices.Equal(handled, want) {
			t.Errorf("handled %q, want %q (one at a time, each key's events in order)", handled, want)
		}
		if n := len(outboxtest.Emitted(t, db, outboxtest.Status(outbox.StatusPublished))); n != 6 {
			t.Errorf("%d events published, want 6", n)
		}
		env := outboxtest.RequireEmitted(t, db, outbox.Event{Type: "invoice.issued", AggregateID: orders[1]})
		if env.Attempt != 1 {
			t.Errorf("attempts of a delivered event: %d, want 1", env.Attempt)
		}

		// Mark and Since on the custom table.
		p := outboxtest.Mark(t, db)
		o := createOrder(t, db, "cy", 1)
		outboxtest.RequireEmittedMany(t, db, []outbox.Event{{AggregateID: fmt.Sprint(o.ID)}}, outboxtest.Since(p))
		outboxtest.Drain(t, db, mux)

		// Nothing left: a second Drain claims nothing.
		if res := outboxtest.Drain(ft, db, mux); res != (relay.Result{}) {
			t.Errorf("second drain %+v", res)
		}
		ft.requirePassed(t)
	})
}

var errBoom = errors.New("boom")

// A failing event is retried at once until its attempts are spent, and the
// test fails naming it, its state and its last error.
func TestDrainFailures(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		var calls int
		failing := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
			calls++
			return fmt.Errorf("charging %s: %w", e.AggregateID, errBoom)
		})
		o := createOrder(t, db, "ada", 1)
		id := outboxtest.Emitted(t, db)[0].ID

		ft := &fakeT{}
		res := outboxtest.Drain(ft, db, failing, outboxtest.RelayOptions(relay.WithMaxAttempts(3)))
		if res != (relay.Result{Claimed: 3, Failed: 2, Dead: 1}) || calls != 3 {
			t.Errorf("result %+v after %d calls, want 3 claims, 2 failures, 1 dead", res, calls)
		}
		ft.requireFailed(t, false, "outboxtest: Drain: 1 event was not delivered (AllowFailures() lets a test expect this):",
			fmt.Sprintf("order.created %s: dead after 3 attempts: no attempts left (3 of 3): charging %d: boom", id, o.ID))
		if logs := strings.Join(ft.logs, "\n"); !strings.Contains(logs, "delivery failed; will retry") || !strings.Contains(logs, "event is dead") {
			t.Errorf("the relay's warnings are not in the test log:\n%s", logs)
		}

		// With AllowFailures, the result says it, the test does not fail.
		createOrder(t, db, "bob", 1)
		calls = 0
		ft = &fakeT{}
		res = outboxtest.Drain(ft, db, failing, outboxtest.AllowFailures())
		ft.requirePassed(t)
		if res.Dead != 1 || res.Failed != relay.DefaultMaxAttempts-1 || calls != relay.DefaultMaxAttempts {
			t.Errorf("result %+v after %d calls, want dead after %d attempts", res, calls, relay.DefaultMaxAttempts)
		}
		if n := len(outboxtest.Emitted(t, db, outboxtest.Status(outbox.StatusDead))); n != 2 {
			t.Errorf("%d dead events, want 2", n)
		}

		// A permanent error is dead at once.
		createOrder(t, db, "cy", 1)
		ft = &fakeT{}
		res = outboxtest.Drain(ft, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			return outbox.Permanent(errBoom)
		}))
		if res != (relay.Result{Claimed: 1, Dead: 1}) {
			t.Errorf("result %+v", res)
		}
		ft.requireFailed(t, false, "dead after 1 attempt:", "boom")
	})
}

// StopOnFailure returns after the first failure, the event left failed.
func TestDrainStopOnFailure(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		calls := 0
		flaky := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			if calls++; calls == 1 {
				return errBoom
			}
			return nil
		})
		createOrder(t, db, "ada", 1)
		createOrder(t, db, "bob", 1)

		ft := &fakeT{}
		res := outboxtest.Drain(ft, db, flaky, outboxtest.StopOnFailure())
		if res != (relay.Result{Claimed: 2, Published: 1, Failed: 1}) {
			t.Errorf("result %+v, want one batch with one failure", res)
		}
		ft.requireFailed(t, false, "1 event was not delivered", ": failed after 1 attempt: boom")
		outboxtest.RequireEmitted(t, db, outbox.Event{Type: "order.created"}, outboxtest.Status(outbox.StatusFailed))

		ft = &fakeT{}
		res = outboxtest.Drain(ft, db, flaky, outboxtest.StopOnFailure())
		ft.requirePassed(t)
		if res != (relay.Result{Claimed: 1, Published: 1}) {
			t.Errorf("result %+v", res)
		}
		outboxtest.RequireNotEmitted(t, db, outbox.Event{}, outboxtest.Status(outbox.StatusPending, outbox.StatusFailed))
	})
}

// Events not due yet wait, unless DeliverDelayed.
func TestDrainDelayed(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		emit(t, db, outbox.Event{Type: "reminder.due", AvailableAt: time.Now().Add(time.Hour)})
		var calls int
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { calls++; return nil })

		ft := &fakeT{}
		if res := outboxtest.Drain(ft, db, pub); res != (relay.Result{}) || calls != 0 {
			t.Errorf("a delayed event was delivered: %+v, %d calls", res, calls)
		}
		ft.requirePassed(t)

		res := outboxtest.Drain(ft, db, pub, outboxtest.DeliverDelayed())
		ft.requirePassed(t)
		if res != (relay.Result{Claimed: 1, Published: 1}) || calls != 1 {
			t.Errorf("DeliverDelayed: %+v, %d calls", res, calls)
		}

		// A retry's backoff is a delay too.
		emit(t, db, outbox.Event{Type: "reminder.due"})
		calls = 0
		flaky := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			if calls++; calls == 1 {
				return errBoom
			}
			return nil
		})
		hourly := outboxtest.RelayOptions(relay.WithBackoff(func(int) time.Duration { return time.Hour }))
		ft = &fakeT{}
		res = outboxtest.Drain(ft, db, flaky, hourly)
		if res != (relay.Result{Claimed: 1, Failed: 1}) {
			t.Errorf("with an hour's backoff: %+v", res)
		}
		ft.requireFailed(t, false, "reminder.due ", ": failed after 1 attempt: boom")
		ft = &fakeT{}
		res = outboxtest.Drain(ft, db, flaky, hourly, outboxtest.DeliverDelayed())
		ft.requirePassed(t)
		if res != (relay.Result{Claimed: 1, Published: 1}) || calls != 2 {
			t.Errorf("DeliverDelayed after a backoff: %+v, %d calls", res, calls)
		}
	})
}

// A publisher that never delivers and never gives up cannot make Drain
// loop forever.
func TestDrainBounded(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		emit(t, db, outbox.Event{ID: "ev-1", Type: "sms.send"})
		down := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			return outbox.Unavailable(errors.New("gateway down"))
		})

		// The released event waits out its delay: Drain ends, and says so.
		ft := &fakeT{}
		res := outboxtest.Drain(ft, db, down)
		if res != (relay.Result{Claimed: 1, Released: 1}) {
			t.Errorf("result %+v", res)
		}
		ft.requireFailed(t, false, "sms.send ev-1: pending after 0 attempts:", "gateway down")

		// Made due again and again: MaxBatches stops it.
		ft = &fakeT{}
		res = outboxtest.Drain(ft, db, down, outboxtest.DeliverDelayed(), outboxtest.MaxBatches(5), outboxtest.AllowFailures())
		if res != (relay.Result{Claimed: 5, Released: 5}) {
			t.Errorf("result %+v", res)
		}
		ft.requireFailed(t, false, "outboxtest: Drain: stopped after 5 batches (MaxBatches) with events still being claimed")

		// A snooze forever, likewise.
		ft = &fakeT{}
		snooze := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			return outbox.Snooze(errors.New("key held"), time.Minute)
		})
		outboxtest.Drain(ft, db, snooze, outboxtest.DeliverDelayed(), outboxtest.MaxBatches(3))
		ft.requireFailed(t, false, "stopped after 3 batches", "sms.send ev-1: pending after 0 attempts:", "key held")
	})
}

// batchPub is a BatchPublisher that fails the events of one type.
type batchPub struct {
	batches int
	failing string
}

func (p *batchPub) Publish(context.Context, *outbox.Envelope) error {
	return errors.New("Publish called on a BatchPublisher")
}

func (p *batchPub) PublishBatch(_ context.Context, es []*outbox.Envelope) []error {
	p.batches++
	errs := make([]error, len(es))
	for i, e := range es {
		if e.Type == p.failing {
			errs[i] = outbox.Permanent(errors.New("rejected by the broker"))
		}
	}
	return errs
}

// Drain keeps a publisher's BatchPublisher, and reports what it failed.
func TestDrainBatchPublisher(t *testing.T) {
	db := sqliteDB(t)
	emit(t, db, outbox.Event{Type: "a"}, outbox.Event{Type: "b"}, outbox.Event{Type: "a"})
	pub := &batchPub{failing: "b"}
	ft := &fakeT{}
	res := outboxtest.Drain(ft, db, pub)
	if res != (relay.Result{Claimed: 3, Published: 2, Dead: 1}) || pub.batches != 1 {
		t.Errorf("result %+v in %d batches", res, pub.batches)
	}
	ft.requireFailed(t, false, "1 event was not delivered", "b ", "dead after 1 attempt: ", "rejected by the broker")
}

// A panicking publisher fails its event like an error, and is reported.
func TestDrainPanic(t *testing.T) {
	db := sqliteDB(t)
	emit(t, db, outbox.Event{Type: "a"})
	ft := &fakeT{}
	res := outboxtest.Drain(ft, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { panic("nil map") }),
		outboxtest.RelayOptions(relay.WithMaxAttempts(2)))
	if res.Dead != 1 {
		t.Errorf("result %+v", res)
	}
	ft.requireFailed(t, false, "dead after 2 attempts", "nil map")
}

func TestDrainRefuses(t *testing.T) {
	// A cancelled context is named as the cause.
	{
		db := sqliteDB(t)
		emit(t, db, outbox.Event{Type: "a"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ft := &fakeT{}
		outboxtest.Drain(ft, db.WithContext(ctx), relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }))
		ft.requireFailed(t, true, "outboxtest: Drain: db's context has ended: context canceled")
	}

	db := sqliteDB(t)
	pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })

	ft := &fakeT{}
	_ = db.Transaction(func(tx *gorm.DB) error {
		outboxtest.Drain(ft, tx, pub)
		return nil
	})
	ft.requireFailed(t, true, "outboxtest: Drain: db is a transaction", "after the unit of work under test has committed")

	ft = &fakeT{}
	outboxtest.Drain(ft, db, pub, outboxtest.MaxBatches(0))
	ft.requireFailed(t, true, "outboxtest: Drain: MaxBatches(0): want at least 1")

	ft = &fakeT{}
	outboxtest.Drain(ft, db, pub, outboxtest.RelayOptions(relay.WithBatchSize(0)))
	ft.requireFailed(t, true, "outboxtest: Drain: relay: invalid option: batch size 0")

	ft = &fakeT{}
	outboxtest.Drain(ft, db, nil)
	ft.requireFailed(t, true, "outboxtest: Drain: db and pub must not be nil")
}

// A database error fails the test at once.
func TestDrainDatabaseError(t *testing.T) {
	db := openSQLite(t)
	must(t, db.Use(&outbox.Plugin{})) // no migration: no table
	ft := &fakeT{}
	outboxtest.Drain(ft, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }))
	ft.requireFailed(t, true, "outboxtest: Drain: relay:", "not migrated", "run outbox.Migrate")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
