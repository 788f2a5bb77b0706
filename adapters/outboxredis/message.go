package outboxredis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// Entry is what Redis says of the stream entry a handler runs for: the
// consume.Delivery's Details on this broker.
//
//	d, _ := consume.DeliveryFrom(ctx)
//	entry := d.Details.(outboxredis.Entry)
type Entry struct {
	Stream   string
	Group    string
	Consumer string
	// EntryID is the stream entry's id, such as "1700000000000-0".
	EntryID string
	// Deliveries is Redis's delivery counter of this entry in the group,
	// this delivery included: 1 the first time. It also counts the
	// deliveries that do not count towards consume.WithMaxDeliveries (see
	// ExcusedKey), which Delivery.Attempt leaves out.
	Deliveries int64
}

// message is one entry this consumer received: read (XREADGROUP, which
// counted a delivery), or due from its pending list (claimed by Begin).
type message struct {
	t          *transport
	id         string
	values     map[string]any
	pending    bool  // from the pending list: Begin claims it
	deliveries int64 // Redis's delivery count, this delivery included
	excused    int64 // deliveries that do not count (ExcusedKey)
	counted    bool  // Redis counted a delivery for this receipt (read, or claimed)
}

// Envelope decodes the entry's FieldEvent.
func (m *message) Envelope() (*outbox.Envelope, error) {
	raw, ok := m.values[FieldEvent].(string)
	if !ok {
		return nil, fmt.Errorf("%w: entry %s has no %q field", consume.ErrMalformed, m.id, FieldEvent)
	}
	env, err := outbox.DecodeEnvelope([]byte(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: entry %s: %w", consume.ErrMalformed, m.id, err)
	}
	return env, nil
}

// Begin checks, before the handler runs, that the entry is still this
// consumer's (a read entry that may have been adopted while it waited) and,
// in key order, that its predecessor is done; a pending entry is then
// claimed (XCLAIM counts the delivery), only if it is still this
// consumer's.
func (m *message) Begin(ctx context.Context) (consume.Start, error) {
	t := m.t
	if !m.pending && !t.keep.mine(ctx, m.id) {
		t.log.Info("outboxredis: another consumer adopted a message waiting in this consumer's batch; left to it", "entry_id", m.id)
		t.forget(m.id)
		return consume.Gone, nil
	}
	if t.mustWait(ctx, m) {
		return consume.Wait, nil
	}
	if !m.pending {
		return consume.Run, nil
	}
	claimedAt := time.Now()
	ok, err := m.claim(ctx)
	if err != nil || !ok {
		return consume.Gone, err
	}
	t.keep.hold(claimedAt, m.id)
	return consume.Run, nil
}

// claimOwnScript delivers entry ARGV[3] of group ARGV[1] again to
// consumer ARGV[2] (XCLAIM, which counts a delivery) only if that consumer
// still owns it, and returns {1, deliveries, excused} (excused from the
// hash KEYS[2], "0" if none); {0} if another consumer owns the entry, {-1}
// if it is no longer pending or was deleted. KEYS[1] is the stream.
var claimOwnScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return {-1} end
if p[1][2] ~= ARGV[2] then return {0} end
local m = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3])
if #m == 0 or not m[1] then return {-1} end
return {1, p[1][4] + 1, redis.call('HGET', KEYS[2], ARGV[3]) or '0'}
`)

// claim delivers the entry to this consumer again if it is still its own
// (claimOwnScript: XCLAIM alone takes an entry from whichever consumer
// holds it, and would take it from one that adopted it and is running
// it). ok is false when the entry is no longer pending, was deleted, or
// another consumer adopted it: it is then forgotten.
func (m *message) claim(ctx context.Context) (ok bool, err error) {
	t := m.t
	res, err := claimOwnScript.Run(ctx, t.rdb, []string{t.stream, t.excusedKey}, t.group, t.name, m.id).Slice()
	if err != nil {
		return false, fmt.Errorf("outboxredis: XCLAIM %s %s: %w", t.stream, m.id, err)
	}
	if n, _ := res[0].(int64); n != 1 || len(res) != 3 {
		if n == 0 {
			t.log.Info("outboxredis: another consumer adopted a message this consumer was to retry; left to it", "entry_id", m.id)
		}
		t.forget(m.id)
		return false, nil
	}
	m.deliveries, _ = res[1].(int64)
	s, _ := res[2].(string)
	m.excused, _ = strconv.ParseInt(s, 10, 64) // none recorded: "0"
	m.counted = true
	return true, nil
}

// Delivery describes the run: Attempt is Redis's deliveries less the
// excused ones; Details an Entry.
func (m *message) Delivery() consume.Delivery {
	t := m.t
	return consume.Delivery{Attempt: int(max(m.deliveries-m.excused, 1)),
		Details: Entry{Stream: t.stream, Group: t.group, Consumer: t.name, EntryID: m.id, Deliveries: m.deliveries}}
}

// Attributes adds the group, entry id and delivery count to the span.
func (m *message) Attributes() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.ConsumerGroup.String(m.t.group), semconv.MessageID.String(m.id),
		semconv.RedisDeliveryCount.Int64(m.deliveries)}
}

// Ack acknowledges the entry and forgets its excused deliveries; in key
// order, the entries waiting are looked at again at once.
func (m *message) Ack(ctx context.Context) error {
	defer m.t.forget(m.id)
	if m.t.cfg.keyOrder {
		defer m.t.progress()
	}
	return m.t.ack(ctx, m.id)
}

// Retry leaves the entry pending, held by this consumer, due again after
// delay (at least the key-order poll, 100ms or the retry delay if shorter;
// in key order an entry released without a delay at the next poll, see
// setDue). A delivery that does not count is recorded as excused (see
// ExcusedKey) when Redis counted it. An entry another consumer adopted
// meanwhile is left to it.
func (m *message) Retry(ctx context.Context, delay time.Duration, counted bool) error {
	t := m.t
	if !t.keep.mine(ctx, m.id) {
		t.forget(m.id)
		return nil
	}
	t.setDue(m.id, time.Now().Add(max(delay, t.orderPoll())), delay == 0 && !counted)
	if counted || !m.counted {
		return nil
	}
	return t.excuse(ctx, m.id)
}

// Dead appends the entry to the dead-letter stream, if any, and
// acknowledges it. If either fails, the entry stays pending, and goes dead
// again when it is delivered again.
func (m *message) Dead(ctx context.Context, reason error) error {
	t := m.t
	if t.cfg.deadStream != "" {
		if err := t.deadLetter(ctx, m, reason); err != nil {
			return err
		}
	}
	return m.Ack(ctx)
}

// ack acknowledges id and forgets its excused deliveries. An entry that
// another consumer may have adopted while its handler ran (see
// keeper.fresh) is acknowledged only if it is still this consumer's: the
// other consumer runs it, and acknowledges it when done, so that in key
// order its successor waits for that run.
func (t *transport) ack(ctx context.Context, id string) error {
	if !t.keep.fresh(id) {
		n, err := ackOwnScript.Run(ctx, t.rdb, []string{t.stream, t.excusedKey}, t.group, t.name, id).Int()
		switch {
		case err != nil:
			return fmt.Errorf("outboxredis: XACK %s %s: %w", t.stream, id, err)
		case n == 0:
			return fmt.Errorf("outboxredis: entry %s was adopted by another consumer while its handler ran here; that one acknowledges it", id)
		}
		return nil
	}
	pipe := t.rdb.Pipeline()
	xack := pipe.XAck(ctx, t.stream, t.group, id)
	pipe.HDel(ctx, t.excusedKey, id)
	_, _ = pipe.Exec(ctx)
	if err := xack.Err(); err != nil {
		return fmt.Errorf("outboxredis: XACK %s %s: %w", t.stream, id, err)
	}
	return nil
}

// orderPoll is how soon an entry handed back without a delay, such as one
// waiting for its predecessor (WithKeyOrder), is due again: 100ms, or the
// retry delay if shorter.
func (t *transport) orderPoll() time.Duration { return min(t.retryDelay, 100*time.Millisecond) }
