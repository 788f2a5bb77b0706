package consume

import "errors"

// ErrInvalidOption is wrapped by every configuration error of New, the
// options and the handlers this package makes (a nil store, a bad handler
// name, an option of another transport).
var ErrInvalidOption = errors.New("consume: invalid option")

// ErrBadPayload is wrapped, marked outbox.Permanent, by the error of a
// typed handler (HandlerOf, TxHandlerOf) whose event's payload does not
// decode into the handler's type, or fails the registry's check: the
// message is dead at once and the function is not called.
var ErrBadPayload = errors.New("consume: payload does not decode")

// ErrMalformed is wrapped by the reason of a message that is not an
// outbox event (its body is not an envelope): it is dead at once, since no
// retry can fix it.
var ErrMalformed = errors.New("consume: not an outbox event")

// ErrTooManyDeliveries is wrapped by the reason of a message whose counted
// runs reached WithMaxDeliveries without success.
var ErrTooManyDeliveries = errors.New("consume: too many deliveries")

// ErrHandlerPanic is wrapped by the error of a handler that panicked: the
// consumer recovers the panic, logs it with the stack, and treats the run
// as a failure (retried, and counted).
var ErrHandlerPanic = errors.New("consume: handler panicked")

// ErrRunning is returned by Run when the Consumer is already running.
var ErrRunning = errors.New("consume: consumer already running")
