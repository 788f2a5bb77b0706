package outboxasynq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// runs records what handlers saw, in order.
type runs struct {
	mu   sync.Mutex
	seen []string
}

func (r *runs) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, fmt.Sprintf(format, args...))
}

func (r *runs) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// DeliveryFrom gives the handler asynq's retry count, which runs that
// IsFailure does not count leave alone; the envelope's Attempt is the
// relay's and stays 1.
func TestDeliveryFromCountsAsynqRetries(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithMaxRetry(3))
	must(t, pub.Publish(t.Context(), &outbox.Envelope{ID: "ev-1", Type: "t", Topic: q, Attempt: 1, Payload: []byte(`{}`)}))
	seen := &runs{}
	mux := asynq.NewServeMux()
	mux.Handle("t", outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
		d, ok := outboxasynq.DeliveryFrom(ctx)
		seen.add("%s %v retried=%d max=%d last=%v attempt=%d ok=%v", d.TaskID, d.Queue == q, d.Retried, d.MaxRetry, d.LastAttempt(), e.Attempt, ok)
		switch len(seen.get()) {
		case 1:
			return outbox.Unavailable(errors.New("its database is down"))
		case 2:
			return errors.New("a real failure")
		}
		return nil
	}))
	startServer(t, addr, q, 1, mux, func(c *asynq.Config) { c.IsFailure = outboxasynq.IsFailure })
	waitFor(t, 15*time.Second, "three runs", func() bool { return len(seen.get()) == 3 })
	want := []string{
		"ev-1 true retried=0 max=3 last=false attempt=1 ok=true",
		"ev-1 true retried=0 max=3 last=false attempt=1 ok=true", // the outage did not count
		"ev-1 true retried=1 max=3 last=false attempt=1 ok=true",
	}
	if got := seen.get(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("runs saw\n%q\nwant\n%q", got, want)
	}
	if _, ok := outboxasynq.DeliveryFrom(t.Context()); ok {
		t.Error("DeliveryFrom outside a handler reported ok")
	}
}

// What the docs say of asynq: on a task's last attempt any error archives
// it, IsFailure notwithstanding (asynq checks the retry count first).
func TestLastAttemptArchivesWhateverIsFailureSays(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithMaxRetry(0))
	must(t, pub.Publish(t.Context(), &outbox.Envelope{ID: "ev-1", Type: "t", Topic: q, Payload: []byte(`{}`)}))
	calls := &counters{}
	mux := asynq.NewServeMux()
	mux.Handle("t", outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
		calls.inc(e.ID)
		if d, _ := outboxasynq.DeliveryFrom(ctx); !d.LastAttempt() {
			t.Errorf("with MaxRetry 0, %+v is not the last attempt", d)
		}
		return outbox.Unavailable(errors.New("its database is down"))
	}))
	startServer(t, addr, q, 1, mux, func(c *asynq.Config) { c.IsFailure = outboxasynq.IsFailure })
	ins := newInspector(t, addr)
	waitFor(t, 15*time.Second, "the task archived", func() bool {
		info, err := ins.GetTaskInfo(q, "ev-1")
		return err == nil && info.State == asynq.TaskStateArchived
	})
	if n := calls.get("ev-1"); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// A handler's outbox.Permanent archives the asynq task; the outbox row
// stays published and is not in the relay's dead letters.
func TestPermanentArchivesTheTaskNotTheOutboxEvent(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	db, _ := setupDB(t, testenv.Open(t, testenv.SQLite))
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: "ev-perm", Type: "t", Topic: q})
	}))
	r, err := relay.New(db, outboxasynq.NewPublisher(newClient(t, addr)), relay.WithLogger(testLogger(t)))
	must(t, err)
	if res, err := r.RunOnce(t.Context()); err != nil || res.Published != 1 {
		t.Fatalf("relay: %+v, %v", res, err)
	}
	mux := asynq.NewServeMux()
	mux.Handle("t", outboxasynq.Handler(func(context.Context, *outbox.Envelope) error {
		return outbox.Permanent(errors.New("cannot ever work"))
	}))
	startServer(t, addr, q, 1, mux)
	ins := newInspector(t, addr)
	waitFor(t, 15*time.Second, "the task archived", func() bool {
		info, err := ins.GetTaskInfo(q, "ev-perm")
		return err == nil && info.State == asynq.TaskStateArchived
	})
	if n := countStatus(t, db, outbox.StatusPublished); n != 1 {
		t.Errorf("%d published outbox events, want 1", n)
	}
	dead, err := mustInspector(t, db).ListDead(t.Context(), relay.Filter{})
	must(t, err)
	if len(dead) != 0 {
		t.Errorf("the relay lists %d dead events, want none", len(dead))
	}
}
