package adapterkit

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

// Idempotent runs a handler at most once successfully per event, as
// recorded in Store under idempotency.HandlerKey(event id, Name): the
// Idempotent (Fn) and IdempotentTx (Tx) wrappers of the adapters. Set one
// of Fn and Tx.
type Idempotent struct {
	Store *idempotency.Store
	Name  string
	// Fn runs under Store.Do: its effects and the record do not commit
	// atomically.
	Fn func(ctx context.Context, e *outbox.Envelope) error
	// Tx runs under Store.DoTx, in a transaction of the store's database
	// in which the record commits too.
	Tx func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error
}

// Check reports a nil store or handler and a bad name (CheckHandlerName).
// The adapters wrap its error in their ErrInvalidOption.
func (m *Idempotent) Check() error {
	switch {
	case m.Store == nil:
		return fmt.Errorf("idempotent handler %q: nil store", m.Name)
	case m.Fn == nil && m.Tx == nil:
		return fmt.Errorf("idempotent handler %q: nil handler", m.Name)
	}
	if err := CheckHandlerName(m.Name); err != nil {
		return fmt.Errorf("idempotent handler: %w", err)
	}
	return nil
}

// Handle runs the handler once per event id.
func (m *Idempotent) Handle(ctx context.Context, e *outbox.Envelope) error {
	key := idempotency.HandlerKey(e.ID, m.Name)
	if m.Tx != nil {
		return m.Store.DoTx(ctx, key, func(tx *gorm.DB) error { return m.Tx(ctx, tx, e) })
	}
	return m.Store.Do(ctx, key, func(ctx context.Context) error { return m.Fn(ctx, e) })
}
