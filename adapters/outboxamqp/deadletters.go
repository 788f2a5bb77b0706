package outboxamqp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
)

// DefaultDeadLettersPage is the page size of DeadLetters for a limit of 0
// or less.
const DefaultDeadLettersPage = 50

// DeadLetters reads a dead-letter queue, the queue that the dead-letter
// exchange of a consumer's queue (x-dead-letter-exchange) routes its dead
// messages to, for the admin page and the CLI: it implements
// consume.DeadLetterReader and consume.DeadLetterReplayer.
//
// AMQP queues cannot be read without taking their messages: a page is
// read with basic.get, the messages held unacknowledged on a channel of
// the reader's own, and handed back (basic.nack with requeue) at once,
// which puts them back at their place in the queue. Meanwhile another
// consumer of the dead-letter queue does not see them, and on a quorum
// queue each read counts as a delivery (its x-delivery-limit applies):
// declare dead-letter queues as classic queues, with no consumer. A page's
// cursor is the number of messages before it, so a page read while
// messages are removed from the queue may skip some.
type DeadLetters struct {
	conn  *amqp.Connection
	queue string
	mu    sync.Mutex // one read at a time: a read holds the messages it took
}

var (
	_ consume.DeadLetterReader   = (*DeadLetters)(nil)
	_ consume.DeadLetterReplayer = (*DeadLetters)(nil)
)

// NewDeadLetters returns a reader of the dead-letter queue named queue,
// over conn (which it does not close).
func NewDeadLetters(conn *amqp.Connection, queue string) *DeadLetters {
	return &DeadLetters{conn: conn, queue: queue}
}

// DeadLetters returns up to limit dead messages after cursor ("" for the
// first page), in the queue's order, and the cursor of the next page (""
// when there is none). Each message's ID is its message-id (the event
// id), or "sha256:" and a digest of its body when it has none; its Source,
// Reason and DeadAt come from the x-death header the broker added.
func (r *DeadLetters) DeadLetters(ctx context.Context, cursor string, limit int) ([]consume.DeadMessage, string, error) {
	skip := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 {
			return nil, "", fmt.Errorf("outboxamqp: dead letters of %s: bad cursor %q", r.queue, cursor)
		}
		skip = n
	}
	if limit <= 0 {
		limit = DefaultDeadLettersPage
	}
	var (
		page []consume.DeadMessage
		next string
	)
	err := r.browse(ctx, false, func(_ *amqp.Channel, i int, d amqp.Delivery) (bool, error) {
		switch {
		case i < skip:
			return true, nil
		case len(page) == limit:
			next = strconv.Itoa(skip + limit)
			return false, nil
		}
		page = append(page, deadMessage(d))
		return true, nil
	})
	return page, next, err
}

// ReplayDead publishes the dead messages of ids (DeadMessage.ID) again to
// the exchange and routing key they were first published with (from
// their x-death header), mandatory and confirmed, and then removes them
// from the dead-letter queue (basic.ack). It returns how many it replayed;
// ids not in the queue are skipped, and a message that cannot be published
// again (no x-death header, no queue bound for its routing key) stays, its
// error joined to the result.
func (r *DeadLetters) ReplayDead(ctx context.Context, ids ...string) (int, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	n, left := 0, len(ids)
	var (
		errs    []error
		returns chan amqp.Return
	)
	err := r.browse(ctx, true, func(ch *amqp.Channel, _ int, d amqp.Delivery) (bool, error) {
		if !want[idOf(d)] {
			return true, nil
		}
		left--
		if returns == nil {
			returns = ch.NotifyReturn(make(chan amqp.Return, 1))
		}
		if err := republish(ctx, ch, returns, d); err != nil {
			errs = append(errs, fmt.Errorf("outboxamqp: replaying %s: %w", idOf(d), err))
			return left > 0, nil
		}
		if err := d.Ack(false); err != nil {
			return false, err
		}
		n++
		return left > 0, nil
	})
	return n, errors.Join(append(errs, err)...)
}

// browse takes the queue's messages one at a time (basic.get) on a
// channel of its own, in confirm mode for replays, and hands each to fn
// until the queue is empty, fn says stop or fails, or ctx ends; then it
// hands back every message fn did not acknowledge.
func (r *DeadLetters) browse(ctx context.Context, confirm bool, fn func(ch *amqp.Channel, i int, d amqp.Delivery) (bool, error)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: opening a channel: %w", ErrConnectionClosed, err)
	}
	defer func() { _ = ch.Close() }() // hands back what a failure left unacknowledged
	if confirm {
		if err := ch.Confirm(false); err != nil {
			return fmt.Errorf("%w: confirm mode: %w", ErrConnectionClosed, err)
		}
	}
	var last uint64
	for i := 0; ctx.Err() == nil; i++ {
		d, ok, err := ch.Get(r.queue, false)
		if err != nil {
			return fmt.Errorf("outboxamqp: reading dead-letter queue %q: %w", r.queue, err)
		}
		if !ok {
			break
		}
		last = d.DeliveryTag
		more, err := fn(ch, i, d)
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if last > 0 {
		if err := ch.Nack(last, true, true); err != nil {
			return fmt.Errorf("outboxamqp: handing back the dead letters read: %w", err)
		}
	}
	return ctx.Err()
}

// republish publishes d again where x-death says it was first published,
// and waits for the broker's confirm; returns is where the channel's
// basic.return arrive.
func republish(ctx context.Context, ch *amqp.Channel, returns chan amqp.Return, d amqp.Delivery) error {
	x, ok := lastDeath(d.Headers)
	if !ok || len(x.keys) == 0 {
		return errors.New("no x-death header: the broker did not dead-letter it")
	}
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if k != "x-death" && k != "x-delivery-count" && !strings.HasPrefix(k, "x-first-death-") && !strings.HasPrefix(k, "x-last-death-") {
			headers[k] = v
		}
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, x.exchange, x.keys[0], true, false, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	})
	if err != nil {
		return err
	}
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return err
	case !acked:
		return fmt.Errorf("%w: to %s", ErrNacked, where(&item{exchange: x.exchange, key: x.keys[0]}))
	}
	select {
	case ret := <-returns:
		return fmt.Errorf("%w: to %s: %s", ErrUnroutable, where(&item{exchange: x.exchange, key: x.keys[0]}), ret.ReplyText)
	default:
		return nil
	}
}

// death is the latest entry of a message's x-death header.
type death struct {
	queue, reason, exchange string
	keys                    []string
	count                   int64
	at                      time.Time
}

// lastDeath reads the most recent entry of x-death (the broker puts it
// first).
func lastDeath(h amqp.Table) (death, bool) {
	list, _ := h["x-death"].([]any)
	if len(list) == 0 {
		return death{}, false
	}
	t, ok := list[0].(amqp.Table)
	if !ok {
		return death{}, false
	}
	var x death
	x.queue, _ = t["queue"].(string)
	x.reason, _ = t["reason"].(string)
	x.exchange, _ = t["exchange"].(string)
	x.at, _ = t["time"].(time.Time)
	x.count = tableInt(t["count"])
	keys, _ := t["routing-keys"].([]any)
	for _, k := range keys {
		if s, ok := k.(string); ok {
			x.keys = append(x.keys, s)
		}
	}
	return x, true
}

// deadMessage describes d for consume.DeadMessage.
func deadMessage(d amqp.Delivery) consume.DeadMessage {
	m := consume.DeadMessage{ID: idOf(d), Reason: "in the dead-letter queue (no x-death header)"}
	if e, err := outbox.DecodeEnvelope(d.Body); err == nil {
		m.Envelope = e
	}
	if x, ok := lastDeath(d.Headers); ok {
		m.Source, m.DeadAt = x.queue, x.at
		m.Reason = fmt.Sprintf("%s in queue %s (x-death, %d times)", x.reason, x.queue, x.count)
		if x.reason == "rejected" {
			m.Reason = fmt.Sprintf("rejected by a consumer of queue %s (%d times); its log and consume.WithOnDead have the error", x.queue, x.count)
		}
	}
	return m
}

// idOf names a dead message: its message-id, or a digest of its body.
func idOf(d amqp.Delivery) string {
	if d.MessageId != "" {
		return d.MessageId
	}
	sum := sha256.Sum256(d.Body)
	return "sha256:" + hex.EncodeToString(sum[:8])
}
