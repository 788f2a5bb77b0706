package idempotency

import "github.com/gormoutbox/outbox"

// MaxHandlerNameLen is the longest handler name HandlerKey accepts: the
// key of the longest event id (outbox.MaxIDLen) still fits MaxKeyLen.
const MaxHandlerNameLen = MaxKeyLen - outbox.MaxIDLen - 1

// HandlerKey is the key under which the adapters record that the handler
// named handler succeeded for the event eventID: "<event id>:<handler>".
func HandlerKey(eventID, handler string) string { return eventID + ":" + handler }
