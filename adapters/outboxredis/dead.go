package outboxredis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
)

// Fields added to a message appended to the dead-letter stream.
const (
	FieldDeadReason     = "dead_reason"
	FieldDeadStream     = "dead_stream"
	FieldDeadEntryID    = "dead_entry_id"
	FieldDeadGroup      = "dead_group"
	FieldDeadDeliveries = "dead_deliveries"
)

// DeadMessage is a message that will not be handled again: malformed,
// failed with outbox.Permanent, or handled too often (WithMaxDeliveries).
type DeadMessage struct {
	Stream  string
	Group   string
	EntryID string
	// Values are the entry's fields as read.
	Values map[string]any
	// Envelope is the decoded event, or nil for a malformed entry.
	Envelope *outbox.Envelope
	// Deliveries is the entry's delivery count when it went dead.
	Deliveries int64
	// Reason wraps the handler's error, ErrMalformed or ErrTooManyDeliveries.
	Reason error
}

// dead logs the message at error level, appends it to the dead-letter
// stream (if any), acknowledges it and calls the OnDead callback. If the
// append or the acknowledgement fails, the message stays pending and goes
// dead again on a later delivery.
func (c *Consumer) dead(ctx context.Context, m redis.XMessage, env *outbox.Envelope, deliveries int64, reason error) {
	attrs := []any{"entry_id", m.ID, "deliveries", deliveries, "reason", reason}
	if env != nil {
		attrs = append(attrs, "event_id", env.ID, "event_type", env.Type)
	}
	c.log.Error("outboxredis: message dead; acknowledged without success", attrs...)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if c.cfg.deadStream != "" {
		values := make([]any, 0, 2*len(m.Values)+10)
		for _, k := range slices.Sorted(maps.Keys(m.Values)) {
			values = append(values, k, m.Values[k])
		}
		values = append(values,
			FieldDeadReason, reason.Error(),
			FieldDeadStream, c.stream,
			FieldDeadEntryID, m.ID,
			FieldDeadGroup, c.group,
			FieldDeadDeliveries, strconv.FormatInt(deliveries, 10))
		if err := c.rdb.XAdd(actx, &redis.XAddArgs{Stream: c.cfg.deadStream, Values: values}).Err(); err != nil {
			c.log.Error("outboxredis: dead-letter append failed; the message stays pending",
				append(attrs, "dead_letter_stream", c.cfg.deadStream, "error", fmt.Errorf("XADD %s: %w", c.cfg.deadStream, err))...)
			return
		}
	}
	if !c.ack(ctx, m.ID, attrs) {
		return
	}
	if c.cfg.onDead != nil {
		c.cfg.onDead(actx, DeadMessage{
			Stream: c.stream, Group: c.group, EntryID: m.ID, Values: m.Values,
			Envelope: env, Deliveries: deliveries, Reason: reason,
		})
	}
}
