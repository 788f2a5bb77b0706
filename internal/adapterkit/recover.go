package adapterkit

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/gormoutbox/outbox"
)

// Call runs fn, the handler of e, and turns a panic into an error
// wrapping sentinel (the package's "handler panicked" error), logged at
// error level with the event, attrs and the stack. The message of the log
// record is sentinel's.
func Call(log *slog.Logger, sentinel error, e *outbox.Envelope, fn func() error, attrs ...any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", sentinel, p)
			log.Error(sentinel.Error(), append(attrs, "event_id", e.ID, "event_type", e.Type,
				"panic", p, "stack", string(debug.Stack()))...)
		}
	}()
	return fn()
}
