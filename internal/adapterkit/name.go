package adapterkit

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gormoutbox/outbox/idempotency"
)

// ErrHandlerName is wrapped by the error of CheckHandlerName.
var ErrHandlerName = errors.New("invalid handler name")

// CheckHandlerName reports a name that cannot name an idempotent handler:
// empty, or longer than idempotency.MaxHandlerNameLen characters (the key
// "<event id>:<name>" would not fit an idempotency key). Every adapter
// checks names with it, and wraps the error in its own sentinel.
func CheckHandlerName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrHandlerName)
	case utf8.RuneCountInString(name) > idempotency.MaxHandlerNameLen:
		return fmt.Errorf("%w: %q is longer than %d characters", ErrHandlerName, name, idempotency.MaxHandlerNameLen)
	}
	return nil
}
