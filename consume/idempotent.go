package consume

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// Idempotent returns a Handler that runs h for an event unless h already
// succeeded for it, as recorded in store under idempotency.HandlerKey
// ("<event id>:<name>", idempotency.Store.Do): redeliveries and duplicate
// messages of an event skip it, on any broker and any consumer sharing the
// store. h's effects and the record do not commit atomically (a crash
// between them runs h again): use IdempotentTx for writes to the store's
// database. While h runs, the same event arriving elsewhere fails with
// idempotency.ErrInProgress and is delivered again later without counting.
// A nil store or h, or a name that is empty or longer than
// idempotency.MaxHandlerNameLen characters, is reported by the handler's
// Validate, which New calls.
func Idempotent(store *idempotency.Store, name string, h Handler) Handler {
	m := &idempotent{store: store, name: name}
	if h != nil {
		m.fn = h.Handle
	}
	return m
}

// IdempotentTx returns a Handler that runs fn inside a transaction of
// store's database together with the record "<event id>:<name>"
// (idempotency.Store.DoTx): fn's writes through tx happen exactly once per
// event, whatever the redeliveries and duplicates. An error of fn rolls
// its writes back. Keep fn short: the transaction is open while it runs.
func IdempotentTx(store *idempotency.Store, name string, fn TxHandlerFunc) Handler {
	return &idempotent{store: store, name: name, tx: fn, isTx: true}
}

type idempotent struct {
	store *idempotency.Store
	name  string
	fn    func(ctx context.Context, e *outbox.Envelope) error
	tx    TxHandlerFunc
	isTx  bool
}

// Handle runs the handler unless it already succeeded for e's id.
func (m *idempotent) Handle(ctx context.Context, e *outbox.Envelope) error {
	key := idempotency.HandlerKey(e.ID, m.name)
	if m.isTx {
		return m.store.DoTx(ctx, key, func(tx *gorm.DB) error { return m.tx(ctx, tx, e) })
	}
	return m.store.Do(ctx, key, func(ctx context.Context) error { return m.fn(ctx, e) })
}

// Validate reports a nil store or handler and a bad name.
func (m *idempotent) Validate() error {
	switch {
	case m.store == nil:
		return fmt.Errorf("%w: idempotent handler %q: nil store", ErrInvalidOption, m.name)
	case m.fn == nil && m.tx == nil:
		return fmt.Errorf("%w: idempotent handler %q: nil handler", ErrInvalidOption, m.name)
	}
	if err := adapterkit.CheckHandlerName(m.name); err != nil {
		return fmt.Errorf("%w: idempotent handler: %w", ErrInvalidOption, err)
	}
	return nil
}
