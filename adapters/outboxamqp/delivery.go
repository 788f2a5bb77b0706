package outboxamqp

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// Message is what RabbitMQ says of a consumed message. A handler reads it
// from consume.DeliveryFrom(ctx): Details.(outboxamqp.Message); so does a
// consume.WithOnDead callback, from DeadLetter.Delivery.Details.
type Message struct {
	Queue       string
	ConsumerTag string
	// DeliveryTag is the message's tag on the consumer's channel.
	DeliveryTag uint64
	Exchange    string
	RoutingKey  string
	// Redelivered is the broker's flag: the message was delivered before
	// (to this consumer or another) and not acknowledged.
	Redelivered bool
	// DeliveryCount is the x-delivery-count header of quorum queues: the
	// broker's count of the earlier deliveries that were not
	// acknowledged (0 on classic queues).
	DeliveryCount int64
	// MessageID is the message-id (the event id, for the Publisher's
	// messages); Headers and Body are the message's (read them; do not
	// modify).
	MessageID string
	Headers   amqp.Table
	Body      []byte
}

// delivery is a consume.Message over an amqp.Delivery.
type delivery struct {
	t  *transport
	d  amqp.Delivery
	id string // the event id, once decoded
}

func (m *delivery) Envelope() (*outbox.Envelope, error) {
	e, err := outbox.DecodeEnvelope(m.d.Body)
	if err != nil {
		return nil, fmt.Errorf("message %q (delivery %d): %w", m.d.MessageId, m.d.DeliveryTag, err)
	}
	m.id = e.ID
	return e, nil
}

func (m *delivery) Begin(context.Context) (consume.Start, error) { return consume.Run, nil }

// Delivery counts the attempts from this consumer's failures of the event.
func (m *delivery) Delivery() consume.Delivery {
	d := m.d
	return consume.Delivery{Attempt: m.t.failures.get(m.id) + 1, Details: Message{
		Queue: m.t.queue, ConsumerTag: d.ConsumerTag, DeliveryTag: d.DeliveryTag, Exchange: d.Exchange,
		RoutingKey: d.RoutingKey, Redelivered: d.Redelivered, DeliveryCount: deliveryCount(d.Headers),
		MessageID: d.MessageId, Headers: d.Headers, Body: d.Body,
	}}
}

// Attributes are the span's RabbitMQ attributes.
func (m *delivery) Attributes() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.MessageID.String(m.d.MessageId),
		semconv.RabbitMQRoutingKey.String(m.d.RoutingKey), semconv.RabbitMQDeliveryTag.Int64(int64(m.d.DeliveryTag))}
}

func (m *delivery) Ack(context.Context) error {
	m.t.failures.forget(m.id)
	return m.d.Ack(false)
}

// Retry requeues the message after delay: RabbitMQ puts a requeued
// message back at once, so the message stays unacknowledged on this
// channel meanwhile, and the batch goes on. A counted run adds to the
// event's failures, which this consumer keeps in memory.
func (m *delivery) Retry(_ context.Context, delay time.Duration, counted bool) error {
	if counted {
		m.t.failures.add(m.id)
	}
	if delay <= 0 {
		return m.d.Nack(false, true)
	}
	m.t.later(delay, func() {
		if err := m.d.Nack(false, true); err != nil {
			m.t.log.Debug("outboxamqp: requeue failed; the broker requeues the message when its channel closes",
				"message_id", m.d.MessageId, "error", err)
		}
	})
	return nil
}

// Dead rejects the message without requeue: the broker moves it to the
// queue's dead-letter exchange (x-dead-letter-exchange), or drops it when
// the queue has none.
func (m *delivery) Dead(context.Context, error) error {
	m.t.failures.forget(m.id)
	return m.d.Nack(false, false)
}

// deliveryCount reads the x-delivery-count header of quorum queues.
func deliveryCount(h amqp.Table) int64 { return tableInt(h["x-delivery-count"]) }

// tableInt reads an integer of an AMQP table, whatever its width; 0 for
// anything else.
func tableInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int16:
		return int64(v)
	case int8:
		return int64(v)
	case int:
		return int64(v)
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	}
	return 0
}

// maxTracked bounds the events whose failures a consumer remembers; past
// it, the counts start afresh (an event requeued to another consumer is
// never forgotten otherwise).
const maxTracked = 10000

// failureCounts counts the failed runs per event id, in memory.
type failureCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (f *failureCounts) get(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[id]
}

func (f *failureCounts) add(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[id]; !ok && len(f.m) >= maxTracked {
		clear(f.m)
	}
	f.m[id]++
}

func (f *failureCounts) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
}
