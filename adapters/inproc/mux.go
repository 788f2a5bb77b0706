package inproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/optionerr"
	"github.com/gormoutbox/outbox/relay"
)

// ErrInvalidHandler is returned (wrapped) by Handle and HandleTx for an
// empty event type or handler name, a nil function, or a handler name
// already registered for the type.
var ErrInvalidHandler = errors.New("inproc: invalid handler")

// ErrInvalidOption is wrapped by every configuration error that Validate
// reports (and so relay.New): a nil store or logger, a negative delay.
var ErrInvalidOption = errors.New("inproc: invalid option")

// DefaultInProgressDelay is how long an event waits before it is delivered
// again when another delivery holds one of its handlers' keys.
const DefaultInProgressDelay = 5 * time.Second

type handler struct {
	name string
	h    consume.Handler
	tx   consume.TxHandlerFunc
}

// Mux routes events to in-process handlers by event type. It is a
// relay.Publisher: pass it to relay.New. It is safe for concurrent use;
// register handlers before the relay starts.
type Mux struct {
	store           *idempotency.Store
	log             *slog.Logger
	inProgressDelay time.Duration
	registry        *outbox.Registry

	invalid error

	mu       sync.RWMutex
	handlers map[string][]handler
}

// Option configures a Mux. Bad options are reported by Validate, which
// relay.New calls.
type Option func(*config)

type config struct {
	log             *slog.Logger
	inProgressDelay time.Duration
	registry        *outbox.Registry
	optionerr.Errors
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.Fail("logger is nil")
		}
		c.log = l
	}
}

// WithInProgressDelay sets how long an event waits before it is delivered
// again when a handler's idempotency key is held by another delivery of
// the event (idempotency.ErrInProgress: a delivery still running, or one
// whose relay crashed, until the store's lease frees the key). Default
// DefaultInProgressDelay; zero keeps the default, a negative delay is an
// error.
func WithInProgressDelay(d time.Duration) Option {
	return func(c *config) {
		switch {
		case d < 0:
			c.Fail("in-progress delay %v is negative", d)
		case d > 0:
			c.inProgressDelay = d
		}
	}
}

// WithRegistry makes the Mux check each event with reg before its
// handlers run (outbox.Registry.Check): handlers receive the event upcast
// to its latest version (Envelope.Version says which), and an event that
// fails the check (unregistered in a strict registry, or a payload that no
// longer matches its registered type) runs no handler and fails with an
// error wrapping consume.ErrBadPayload, marked outbox.Permanent, so that
// the relay marks it dead at once with the reason.
func WithRegistry(reg *outbox.Registry) Option {
	return func(c *config) {
		if reg == nil {
			c.Fail("registry is nil")
			return
		}
		if err := reg.Err(); err != nil {
			c.Fail("registry: %w", err)
		}
		c.registry = reg
	}
}

// NewMux returns a Mux that records each handler's success in store,
// keyed by event id and handler name. A nil store and bad options are
// reported by Validate.
func NewMux(store *idempotency.Store, opts ...Option) *Mux {
	cfg := config{log: slog.Default(), inProgressDelay: DefaultInProgressDelay,
		Errors: optionerr.Errors{Sentinel: ErrInvalidOption}}
	if store == nil {
		cfg.Fail("store is nil")
	}
	optionerr.Apply(&cfg, &cfg.Errors, opts)
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	return &Mux{store: store, handlers: map[string][]handler{}, log: cfg.log,
		inProgressDelay: cfg.inProgressDelay, registry: cfg.registry, invalid: cfg.Err()}
}

// Validate reports the configuration errors of NewMux (joined), each
// wrapping ErrInvalidOption, or nil. relay.New calls it and refuses an
// invalid Mux.
func (m *Mux) Validate() error { return m.invalid }

// Handle registers h, a handler of package consume (the one handler
// vocabulary of every adapter), as the handler named name for events of
// eventType. Every handler of a type runs for each of its events, in
// registration order; the success of each is recorded, so that a
// redelivered event skips the handlers that already succeeded (there is
// no need to wrap h with consume.Idempotent). h's effects and its record
// do not commit atomically: use HandleTx when the effect is a write to
// the store's database, or make h idempotent. h's context carries the
// envelope (consume.EnvelopeFrom) and a consume.Delivery whose Attempt
// and MaxAttempts are the relay's.
func (m *Mux) Handle(eventType, name string, h consume.Handler) error {
	if h == nil {
		return fmt.Errorf("%w: %s/%s: nil handler", ErrInvalidHandler, eventType, name)
	}
	return m.add(eventType, handler{name: name, h: h})
}

// HandleFunc registers fn as Handle registers a handler.
func (m *Mux) HandleFunc(eventType, name string, fn func(ctx context.Context, e *outbox.Envelope) error) error {
	if fn == nil {
		return fmt.Errorf("%w: %s/%s: nil function", ErrInvalidHandler, eventType, name)
	}
	return m.Handle(eventType, name, consume.HandlerFunc(fn))
}

// HandleTx registers fn as a transactional handler: it runs inside a
// transaction of the store's database, and its writes through tx commit
// together with its idempotency record, so that they happen exactly once.
func (m *Mux) HandleTx(eventType, name string, fn consume.TxHandlerFunc) error {
	if fn == nil {
		return fmt.Errorf("%w: %s/%s: nil function", ErrInvalidHandler, eventType, name)
	}
	return m.add(eventType, handler{name: name, tx: fn})
}

func (m *Mux) add(eventType string, h handler) error {
	switch {
	case eventType == "":
		return fmt.Errorf("%w: empty event type", ErrInvalidHandler)
	}
	if err := adapterkit.CheckHandlerName(h.name); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidHandler, eventType, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, existing := range m.handlers[eventType] {
		if existing.name == h.name {
			return fmt.Errorf("%w: %s/%s: registered twice", ErrInvalidHandler, eventType, h.name)
		}
	}
	m.handlers[eventType] = append(m.handlers[eventType], h)
	return nil
}

// Publish runs every handler of e.Type that has not yet succeeded for e,
// and implements relay.Publisher. It returns nil when all succeeded (or
// none is registered), and otherwise the joined errors of those that
// failed: Permanent only when every failure is; and when every failure is
// a key held by another delivery of the event (idempotency.ErrInProgress),
// outbox.Snooze, so that the relay delivers the event again after the
// in-progress delay without spending an attempt. A handler that panics
// fails with consume.ErrHandlerPanic; the panic is logged with its name.
func (m *Mux) Publish(ctx context.Context, e *outbox.Envelope) error {
	m.mu.RLock()
	hs := m.handlers[e.Type]
	m.mu.RUnlock()
	if len(hs) == 0 {
		m.log.Debug("no handler for event type", "event_id", e.ID, "event_type", e.Type)
		return nil
	}
	if m.registry != nil {
		checked, err := adapterkit.CheckEnvelope(m.registry, e, consume.ErrBadPayload)
		if err != nil {
			return err
		}
		e = checked
	}
	type failure struct {
		name string
		err  error
	}
	var failures []failure
	permanent, inProgress := true, true
	for _, h := range hs {
		if err := m.run(ctx, h, e); err != nil {
			failures = append(failures, failure{h.name, err})
			permanent = permanent && outbox.IsPermanent(err)
			inProgress = inProgress && errors.Is(err, idempotency.ErrInProgress)
		}
	}
	if len(failures) == 0 {
		return nil
	}
	errs := make([]error, len(failures))
	for i, f := range failures {
		if outbox.IsPermanent(f.err) && !permanent {
			// Another handler can still succeed on a retry: keep this
			// failure's message but not its Permanent mark, which would
			// make the relay give up on the event.
			errs[i] = fmt.Errorf("handler %s: %v", f.name, f.err)
		} else {
			errs[i] = fmt.Errorf("handler %s: %w", f.name, f.err)
		}
	}
	err := errors.Join(errs...)
	switch {
	case inProgress:
		return outbox.Snooze(err, m.inProgressDelay)
	case permanent:
		return outbox.Permanent(err)
	}
	return err
}

// Describe lists the event types the Mux handles, for relay heartbeats
// and "outbox stats" (it implements relay.Describer).
func (m *Mux) Describe() string {
	m.mu.RLock()
	types := slices.Sorted(maps.Keys(m.handlers))
	m.mu.RUnlock()
	if len(types) == 0 {
		return "inproc, no handlers"
	}
	return "inproc handlers of " + strings.Join(types, ", ")
}

// run runs one handler of e under its idempotency key, with the envelope
// and the relay's attempts in its context.
func (m *Mux) run(ctx context.Context, h handler, e *outbox.Envelope) error {
	key := idempotency.HandlerKey(e.ID, h.name)
	d := consume.Delivery{System: System, Destination: "inproc", Attempt: e.Attempt}
	d.MaxAttempts, _ = relay.MaxAttemptsOf(ctx)
	ctx = consume.WithDelivery(consume.WithEnvelope(ctx, e), d)
	if h.tx != nil {
		return m.store.DoTx(ctx, key, func(tx *gorm.DB) error {
			return m.call(h.name, e, func() error { return h.tx(ctx, tx, e) })
		})
	}
	return m.store.Do(ctx, key, func(ctx context.Context) error {
		return m.call(h.name, e, func() error { return h.h.Handle(ctx, e) })
	})
}

// System is consume.Delivery.System for handlers a Mux runs: the relay's
// own process.
const System = "outbox"

// call calls fn, turning a panic into an error naming the handler
// (wrapping consume.ErrHandlerPanic).
func (m *Mux) call(name string, e *outbox.Envelope, fn func() error) error {
	return adapterkit.Call(m.log, consume.ErrHandlerPanic, e, fn, "handler", name)
}
