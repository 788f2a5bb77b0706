package outboxredis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
)

// Fields added to a message appended to the dead-letter stream
// (WithDeadLetterStream).
const (
	FieldDeadReason     = "dead_reason"
	FieldDeadStream     = "dead_stream"
	FieldDeadEntryID    = "dead_entry_id"
	FieldDeadGroup      = "dead_group"
	FieldDeadDeliveries = "dead_deliveries"
)

// deadLetter appends m to the dead-letter stream: its fields, then the
// dead ones.
func (t *transport) deadLetter(ctx context.Context, m *message, reason error) error {
	values := make([]any, 0, 2*len(m.values)+10)
	for _, k := range slices.Sorted(maps.Keys(m.values)) {
		values = append(values, k, m.values[k])
	}
	values = append(values, FieldDeadReason, reason.Error(), FieldDeadStream, t.stream, FieldDeadEntryID, m.id,
		FieldDeadGroup, t.group, FieldDeadDeliveries, strconv.FormatInt(m.deliveries, 10))
	if err := t.rdb.XAdd(ctx, &redis.XAddArgs{Stream: t.cfg.deadStream, Values: values}).Err(); err != nil {
		return fmt.Errorf("outboxredis: XADD %s (dead letter of %s): %w", t.cfg.deadStream, m.id, err)
	}
	return nil
}

// DeadLetters reads a dead-letter stream that consumers WithDeadLetterStream
// append to, and replays its messages: a consume.DeadLetterReader and
// consume.DeadLetterReplayer, for the admin page and the CLI.
type DeadLetters struct {
	rdb    redis.UniversalClient
	stream string
}

// NewDeadLetters returns the reader of the dead-letter stream deadStream.
func NewDeadLetters(rdb redis.UniversalClient, deadStream string) *DeadLetters {
	return &DeadLetters{rdb: rdb, stream: deadStream}
}

// DeadLetters returns up to limit (at least 1) dead messages after the
// entry id cursor, oldest first (XRANGE), and the cursor of the next page.
// A DeadMessage's ID is its entry id in the dead-letter stream; DeadAt is
// that id's time.
func (d *DeadLetters) DeadLetters(ctx context.Context, cursor string, limit int) ([]consume.DeadMessage, string, error) {
	start := "-"
	if cursor != "" {
		start = "(" + cursor
	}
	limit = max(limit, 1)
	got, err := d.rdb.XRangeN(ctx, d.stream, start, "+", int64(limit)+1).Result()
	if err != nil {
		return nil, "", fmt.Errorf("outboxredis: XRANGE %s: %w", d.stream, err)
	}
	next := ""
	if len(got) > limit {
		got, next = got[:limit], got[limit-1].ID
	}
	page := make([]consume.DeadMessage, len(got))
	for i, m := range got {
		page[i] = deadMessage(m)
	}
	return page, next, nil
}

// deadMessage reads a dead-letter entry.
func deadMessage(m redis.XMessage) consume.DeadMessage {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	dm := consume.DeadMessage{ID: m.ID, Source: str(FieldDeadStream) + " (group " + str(FieldDeadGroup) + ")", Reason: str(FieldDeadReason)}
	dm.Deliveries, _ = strconv.Atoi(str(FieldDeadDeliveries))
	if ms, err := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64); err == nil {
		dm.DeadAt = time.UnixMilli(ms).UTC()
	}
	if env, err := outbox.DecodeEnvelope([]byte(str(FieldEvent))); err == nil {
		dm.Envelope = env
	}
	return dm
}

// ReplayDead appends each dead message of ids back to the stream it was
// consumed from (its fields without the dead ones: a new entry, delivered
// to every group of that stream), then deletes it from the dead-letter
// stream (XDEL). It returns how many it replayed; ids no longer there are
// skipped. A replayed event of a key chain names its old predecessor,
// which is done: it runs at once, after its key's later events.
func (d *DeadLetters) ReplayDead(ctx context.Context, ids ...string) (int, error) {
	n := 0
	for _, id := range ids {
		got, err := d.rdb.XRange(ctx, d.stream, id, id).Result()
		if err != nil {
			return n, fmt.Errorf("outboxredis: XRANGE %s %s: %w", d.stream, id, err)
		}
		if len(got) == 0 {
			continue
		}
		source, _ := got[0].Values[FieldDeadStream].(string)
		values := make([]any, 0, 2*len(got[0].Values))
		for _, k := range slices.Sorted(maps.Keys(got[0].Values)) {
			if !strings.HasPrefix(k, "dead_") {
				values = append(values, k, got[0].Values[k])
			}
		}
		if err := d.rdb.XAdd(ctx, &redis.XAddArgs{Stream: source, Values: values}).Err(); err != nil {
			return n, fmt.Errorf("outboxredis: replaying %s of %s to %s: %w", id, d.stream, source, err)
		}
		if err := d.rdb.XDel(ctx, d.stream, id).Err(); err != nil {
			return n, fmt.Errorf("outboxredis: XDEL %s %s after its replay: %w", d.stream, id, err)
		}
		n++
	}
	return n, nil
}
