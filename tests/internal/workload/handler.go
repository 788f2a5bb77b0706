package workload

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/relay"
)

// HandlerName is the name of the effect handler in idempotency keys.
const HandlerName = "effect"

// Behavior is how a handler behaves, beyond writing its effect.
type Behavior struct {
	// Worker names the relay or consumer in the effects it writes.
	Worker string
	// Work is how long each handling takes before the effect is written.
	Work time.Duration
	// SlowPercent of the events (chosen by id) take Slow on their first
	// attempt, ignoring the context: a handler slower than the lease.
	SlowPercent int
	Slow        time.Duration
	// FailFirstPercent of the events (chosen by id) fail their first
	// attempt with an ordinary error.
	FailFirstPercent int
	// PoisonID is an event that makes the process exit (status 3) when it
	// is handled: a handler that crashes its relay.
	PoisonID string
	// FailKey's events fail every attempt made before FailKeyUntil.
	FailKey      string
	FailKeyUntil time.Time
}

// PoisonExit is the exit status of a relay process that handled the
// poison event.
const PoisonExit = 3

// Chosen reports whether the event id falls in the percentage (stable per
// id, so that every process agrees).
func Chosen(id string, percent int) bool {
	if percent <= 0 {
		return false
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32()%100) < percent
}

// errFirstAttempt is the transient failure of FailFirstPercent.
var errFirstAttempt = errors.New("workload: first attempt fails")

// Calls records, in memory, when each event was handled (for in-process
// checks of retry timing).
type Calls struct {
	mu    sync.Mutex
	calls map[string][]time.Time
}

// NewCalls returns an empty record.
func NewCalls() *Calls { return &Calls{calls: map[string][]time.Time{}} }

func (c *Calls) add(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.calls[id] = append(c.calls[id], time.Now())
	c.mu.Unlock()
}

// Of returns the times the event was handled.
func (c *Calls) Of(id string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.calls[id]...)
}

// handle is the handler body shared by every transport: behave, then write
// the effect through tx (whose transaction holds the idempotency record).
func (b Behavior) handle(ctx context.Context, tx *gorm.DB, e *outbox.Envelope, calls *Calls) error {
	calls.add(e.ID)
	if b.PoisonID != "" && e.ID == b.PoisonID {
		fmt.Fprintf(os.Stderr, "poison event %s: exiting\n", e.ID)
		os.Exit(PoisonExit)
	}
	if b.Work > 0 {
		sleep(ctx, b.Work)
	}
	if b.FailKey != "" && e.PartitionKey == b.FailKey && time.Now().Before(b.FailKeyUntil) {
		return fmt.Errorf("workload: key %s fails attempt %d", b.FailKey, e.Attempt)
	}
	if e.Attempt <= 1 && e.Type == TypeWork {
		if Chosen(e.ID, b.SlowPercent) {
			time.Sleep(b.Slow) // ignores ctx: slower than the lease
		}
		if Chosen(e.ID, b.FailFirstPercent) {
			return errFirstAttempt
		}
	}
	kind := "work"
	if e.Type == TypeProbe {
		kind = "probe"
	}
	return tx.Create(&Effect{EventID: e.ID, PartitionKey: e.PartitionKey, Kind: kind, Worker: b.Worker, Attempt: e.Attempt}).Error
}

// NewMux returns the in-process publisher: an inproc.Mux whose handler
// writes each event's effect with its idempotency record (DoTx: exactly
// once).
func NewMux(db *gorm.DB, b Behavior, calls *Calls, log *slog.Logger) (*inproc.Mux, error) {
	store, err := idempotency.NewStore(db)
	if err != nil {
		return nil, err
	}
	mux := inproc.NewMux(store, inproc.WithLogger(log))
	for _, typ := range []string{TypeWork, TypeProbe} {
		if err := mux.HandleTx(typ, HandlerName, func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			return b.handle(ctx, tx, e, calls)
		}); err != nil {
			return nil, err
		}
	}
	return mux, nil
}

// probed records which relay published each probe event.
type probed struct {
	relay string
	db    *gorm.DB
	next  relay.Publisher
}

func (p *probed) record(ctx context.Context, e *outbox.Envelope) {
	if e.Type != TypeProbe {
		return
	}
	// Best effort: a lost record only delays Probe, which emits more.
	_ = p.db.WithContext(ctx).Create(&ProbeRecord{EventID: e.ID, Relay: p.relay}).Error
}

func (p *probed) Publish(ctx context.Context, e *outbox.Envelope) error {
	err := p.next.Publish(ctx, e)
	if err == nil {
		p.record(ctx, e)
	}
	return err
}

type probedBatch struct {
	probed
	batch relay.BatchPublisher
}

func (p *probedBatch) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := p.batch.PublishBatch(ctx, es)
	for i, e := range es {
		if i < len(errs) && errs[i] == nil {
			p.record(ctx, e)
		}
	}
	return errs
}

// withProbes wraps pub so that probe events it publishes are recorded
// under the relay's name.
func withProbes(name string, db *gorm.DB, pub relay.Publisher) relay.Publisher {
	p := probed{relay: name, db: db, next: pub}
	if b, ok := pub.(relay.BatchPublisher); ok {
		return &probedBatch{probed: p, batch: b}
	}
	return &p
}
