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
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

// HandlerFunc handles one event. Its error follows the relay's rules:
// outbox.Permanent for a failure that retrying cannot fix, anything else
// for a retry.
type HandlerFunc func(ctx context.Context, e *outbox.Envelope) error

// TxHandlerFunc handles one event inside a database transaction, in which
// its idempotency record commits too.
type TxHandlerFunc func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error

// ErrInvalidHandler is returned (wrapped) by Handle and HandleTx for an
// empty event type or handler name, a nil function, or a handler name
// already registered for the type.
var ErrInvalidHandler = errors.New("inproc: invalid handler")

// maxNameLen keeps "<event id>:<handler name>" within idempotency.MaxKeyLen.
const maxNameLen = idempotency.MaxHandlerNameLen

type handler struct {
	name string
	fn   HandlerFunc
	tx   TxHandlerFunc
}

// Mux routes events to in-process handlers by event type. It is a
// relay.Publisher: pass it to relay.New. It is safe for concurrent use;
// register handlers before the relay starts.
type Mux struct {
	store *idempotency.Store
	log   *slog.Logger

	mu       sync.RWMutex
	handlers map[string][]handler
}

// Option configures a Mux.
type Option func(*Mux)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(m *Mux) { m.log = l } }

// NewMux returns a Mux that records each handler's success in store,
// keyed by event id and handler name.
func NewMux(store *idempotency.Store, opts ...Option) *Mux {
	m := &Mux{store: store, handlers: map[string][]handler{}, log: slog.Default()}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Handle registers fn as the handler named name for events of eventType.
// Every handler of a type runs for each of its events, in registration
// order; the success of each is recorded, so that a redelivered event
// skips the handlers that already succeeded. fn's effects and its record
// do not commit atomically: use HandleTx when the effect is a write to the
// store's database, or make fn idempotent.
func (m *Mux) Handle(eventType, name string, fn HandlerFunc) error {
	if fn == nil {
		return fmt.Errorf("%w: %s/%s: nil function", ErrInvalidHandler, eventType, name)
	}
	return m.add(eventType, handler{name: name, fn: fn})
}

// HandleTx registers fn as a transactional handler: it runs inside a
// transaction of the store's database, and its writes through tx commit
// together with its idempotency record, so that they happen exactly once.
func (m *Mux) HandleTx(eventType, name string, fn TxHandlerFunc) error {
	if fn == nil {
		return fmt.Errorf("%w: %s/%s: nil function", ErrInvalidHandler, eventType, name)
	}
	return m.add(eventType, handler{name: name, tx: fn})
}

func (m *Mux) add(eventType string, h handler) error {
	switch {
	case eventType == "":
		return fmt.Errorf("%w: empty event type", ErrInvalidHandler)
	case h.name == "":
		return fmt.Errorf("%w: %s: empty handler name", ErrInvalidHandler, eventType)
	case utf8.RuneCountInString(h.name) > maxNameLen:
		return fmt.Errorf("%w: %s/%s: handler name longer than %d characters", ErrInvalidHandler, eventType, h.name, maxNameLen)
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
// failed: Permanent only when every failure is.
func (m *Mux) Publish(ctx context.Context, e *outbox.Envelope) error {
	m.mu.RLock()
	hs := m.handlers[e.Type]
	m.mu.RUnlock()
	if len(hs) == 0 {
		m.log.Debug("no handler for event type", "event_id", e.ID, "event_type", e.Type)
		return nil
	}
	type failure struct {
		name string
		err  error
	}
	var failures []failure
	permanent := true
	for _, h := range hs {
		key := idempotency.HandlerKey(e.ID, h.name)
		var err error
		if h.tx != nil {
			err = m.store.DoTx(ctx, key, func(tx *gorm.DB) error { return h.tx(ctx, tx, e) })
		} else {
			err = m.store.Do(ctx, key, func(ctx context.Context) error { return h.fn(ctx, e) })
		}
		if err != nil {
			failures = append(failures, failure{h.name, err})
			permanent = permanent && outbox.IsPermanent(err)
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
	if permanent {
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
