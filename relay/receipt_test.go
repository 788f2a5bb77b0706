package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/oteltest"
	"github.com/gormoutbox/outbox/relay"
)

// receiptBatchPub is a BatchPublisher that reports a receipt for every
// event it is handed, and fails those failing says.
type receiptBatchPub struct {
	failing map[string]error
}

func (p *receiptBatchPub) Publish(ctx context.Context, e *outbox.Envelope) error {
	return p.PublishBatch(ctx, []*outbox.Envelope{e})[0]
}

func (p *receiptBatchPub) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := make([]error, len(es))
	for i, e := range es {
		relay.SetReceipt(ctx, e, "first try")
		relay.SetReceipt(ctx, e, "orders/1@"+e.ID) // the last one counts
		errs[i] = p.failing[e.ID]
	}
	return errs
}

// A publisher's receipts (SetReceipt) are kept with published outcomes in
// the attempt log, through PublishBatch (with tracing on, which hands the
// publisher copies of the envelopes) and through Publish (concurrent
// deliveries); a failed, dead or unavailable outcome keeps none, even when
// the publisher set one; an event for which none was set has none.
func TestAttemptLogReceipts(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 5, event)
		id := func(i int) string { return event(i).ID }
		batch := &receiptBatchPub{failing: map[string]error{
			id(1): errFlaky, id(2): outbox.Permanent(errFlaky), id(3): outbox.Unavailable(errFlaky),
		}}
		// With tracing on, the publisher is handed copies of the envelopes,
		// carrying their spans' trace context.
		tp := oteltest.NewTracerProvider()
		_, err := newRelay(t, db, batch, relay.WithAttemptLog(), relay.WithWorkerID("w1"), relay.WithTracerProvider(tp)).RunOnce(t.Context())
		must(t, err)
		want := map[int]struct{ outcome, receipt string }{
			0: {relay.AttemptPublished, "orders/1@" + id(0)},
			1: {relay.AttemptRetried, ""},
			2: {relay.AttemptDead, ""},
			3: {relay.AttemptUnavailable, ""},
			4: {relay.AttemptPublished, "orders/1@" + id(4)},
		}
		for i, w := range want {
			got := attemptsOf(t, db, id(i))
			if len(got) != 1 || got[0].Outcome != w.outcome || got[0].Receipt != w.receipt {
				t.Errorf("%s: attempt log %+v, want one %s record with receipt %q", id(i), got, w.outcome, w.receipt)
			}
		}

		// Publish, concurrently: each event its own receipt, or none.
		emitN(t, db, 20, func(i int) outbox.Event { return event(100 + i) })
		single := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
			if !strings.HasSuffix(e.ID, "0") {
				relay.SetReceipt(ctx, e, "seen "+e.ID)
			}
			return nil
		})
		_, err = newRelay(t, db, single, relay.WithAttemptLog(), relay.WithConcurrency(8)).RunOnce(t.Context())
		must(t, err)
		for i := range 20 {
			e := id(100 + i)
			want := "seen " + e
			if strings.HasSuffix(e, "0") {
				want = ""
			}
			if got := attemptsOf(t, db, e); len(got) != 1 || got[0].Receipt != want {
				t.Errorf("%s: attempt log %+v, want receipt %q", e, got, want)
			}
		}
	})
}

// A receipt is stored as valid UTF-8 without NUL bytes, cut to 1,024
// bytes.
func TestAttemptLogReceiptBounded(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		long := "\x00bad\xff" + strings.Repeat("é", 1000)
		pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
			relay.SetReceipt(ctx, e, long)
			return nil
		})
		_, err := newRelay(t, db, pub, relay.WithAttemptLog()).RunOnce(t.Context())
		must(t, err)
		got := attemptsOf(t, db, event(0).ID)
		if len(got) != 1 || len(got[0].Receipt) > 1024 || !strings.HasPrefix(got[0].Receipt, "bad?éé") ||
			strings.ContainsRune(got[0].Receipt, 0) {
			t.Errorf("stored receipt %q (%d bytes), want it cleaned and at most 1024 bytes", got[0].Receipt, len(got[0].Receipt))
		}
	})
}

// SetReceipt outside a relay, and in a relay without the attempt log, does
// nothing (and does not fail).
func TestSetReceiptWithoutAttemptLog(t *testing.T) {
	relay.SetReceipt(context.Background(), &outbox.Envelope{ID: "x"}, "nowhere")
	relay.SetReceipt(context.Background(), nil, "nowhere")
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 3, event)
		res, err := newRelay(t, db, &receiptBatchPub{}).RunOnce(t.Context())
		must(t, err)
		var logged int64
		must(t, db.Table("outbox_events_attempts").Count(&logged).Error)
		if res.Published != 3 || logged != 0 {
			t.Errorf("%+v with %d attempt records, want 3 published and no record", res, logged)
		}
	})
}

// WithAttemptLog needs the receipt column (migration 0010): New refuses a
// table without it, naming the migration, and Inspector.Attempts says the
// same; a relay without the log runs.
func TestAttemptLogNeedsReceiptColumn(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Exec("ALTER TABLE outbox_events_attempts DROP COLUMN receipt").Error)
		_, err := relay.New(db, newRecorder(), relay.WithAttemptLog())
		if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "0010") {
			t.Fatalf("New with the attempt log and no receipt column: %v, want ErrNotMigrated naming migration 0010", err)
		}
		emitN(t, db, 1, event)
		_, err = newRelay(t, db, newRecorder()).RunOnce(t.Context())
		must(t, err)
		insp, err := relay.NewInspector(db)
		must(t, err)
		if _, err := insp.Attempts(t.Context(), event(0).ID); !errors.Is(err, outbox.ErrNotMigrated) {
			t.Errorf("Attempts without the receipt column: %v, want ErrNotMigrated", err)
		}
	})
}
