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
	"github.com/gormoutbox/outbox/consume"
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

// consume.DeliveryFrom gives the handler its counted attempt (asynq's
// retry count, plus one, which runs that IsFailure does not count leave
// alone) and the task's details; the envelope's Attempt is the relay's and
// stays 1. MaxAttempts is the task's MaxRetry (less than
// WithMaxDeliveries here).
func TestDeliveryCountsAsynqRetries(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithMaxRetry(3))
	must(t, pub.Publish(t.Context(), &outbox.Envelope{ID: "ev-1", Type: "t", Topic: q, Attempt: 1, Payload: []byte(`{}`)}))
	seen := &runs{}
	mux := asynq.NewServeMux()
	mux.Handle("t", outboxasynq.Handler(handle(func(ctx context.Context, e *outbox.Envelope) error {
		d, ok := consume.DeliveryFrom(ctx)
		task, _ := d.Details.(outboxasynq.Task)
		seen.add("%s %v %s attempt=%d/%d retried=%d max=%d last=%v envelope=%d ok=%v", task.ID, task.Queue == q && d.Destination == q,
			d.System, d.Attempt, d.MaxAttempts, task.Retried, task.MaxRetry, d.LastAttempt(), e.Attempt, ok)
		switch len(seen.get()) {
		case 1:
			return outbox.Unavailable(errors.New("its database is down"))
		case 2:
			return errors.New("a real failure")
		}
		return nil
	}), consume.WithRetryDelay(20*time.Millisecond), consume.WithLogger(testLogger(t))))
	startServer(t, addr, q, 1, mux, serveWithPolicy)
	waitFor(t, 15*time.Second, "three runs", func() bool { return len(seen.get()) == 3 })
	want := []string{
		"ev-1 true asynq attempt=1/3 retried=0 max=3 last=false envelope=1 ok=true",
		"ev-1 true asynq attempt=1/3 retried=0 max=3 last=false envelope=1 ok=true", // the outage did not count
		"ev-1 true asynq attempt=2/3 retried=1 max=3 last=false envelope=1 ok=true",
	}
	if got := seen.get(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("runs saw\n%q\nwant\n%q", got, want)
	}
}

// serveWithPolicy configures a server as Handler asks: IsFailure and
// RetryDelay.
func serveWithPolicy(c *asynq.Config) {
	c.IsFailure = outboxasynq.IsFailure
	c.RetryDelayFunc = outboxasynq.RetryDelay(nil)
}

// Uncounted runs never archive a task: Handler keeps asynq's last attempt
// (on which any error archives) unused. With MaxRetry 1, a dependency down
// for many runs, then a failure, then a success: the task completes.
func TestUncountedRunsNeverArchiveATask(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithMaxRetry(1))
	must(t, pub.Publish(t.Context(), &outbox.Envelope{ID: "ev-1", Type: "t", Topic: q, Payload: []byte(`{}`)}))
	calls := &counters{}
	mux := asynq.NewServeMux()
	mux.Handle("t", outboxasynq.Handler(handle(func(ctx context.Context, e *outbox.Envelope) error {
		if calls.inc(e.ID) <= 3 {
			return outbox.Snooze(errors.New("not yet"), 10*time.Millisecond)
		}
		return nil
	}), consume.WithLogger(testLogger(t))))
	startServer(t, addr, q, 1, mux, serveWithPolicy)
	ins := newInspector(t, addr)
	waitFor(t, 15*time.Second, "the task completed", func() bool {
		info, err := ins.GetTaskInfo(q, "ev-1")
		return err == nil && info.State == asynq.TaskStateCompleted
	})
	if n := calls.get("ev-1"); n != 4 {
		t.Errorf("handler ran %d times, want 4", n)
	}
}

// What the docs say of asynq: with MaxRetry 0 every attempt is the last,
// on which any error archives the task, IsFailure notwithstanding (asynq
// checks the retry count first).
func TestLastAttemptArchivesWhateverIsFailureSays(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithMaxRetry(0))
	must(t, pub.Publish(t.Context(), &outbox.Envelope{ID: "ev-1", Type: "t", Topic: q, Payload: []byte(`{}`)}))
	calls := &counters{}
	mux := asynq.NewServeMux()
	mux.Handle("t", outboxasynq.Handler(handle(func(ctx context.Context, e *outbox.Envelope) error {
		calls.inc(e.ID)
		if d, _ := consume.DeliveryFrom(ctx); !d.LastAttempt() {
			t.Errorf("with MaxRetry 0, %+v is not the last attempt", d)
		}
		return outbox.Unavailable(errors.New("its database is down"))
	}), consume.WithLogger(testLogger(t))))
	startServer(t, addr, q, 1, mux, serveWithPolicy)
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
	mux.Handle("t", outboxasynq.Handler(handle(func(context.Context, *outbox.Envelope) error {
		return outbox.Permanent(errors.New("cannot ever work"))
	}), consume.WithLogger(testLogger(t))))
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
