package outboxnats

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// maxExcused bounds the deliveries a consumer remembers as excused; past
// it, it forgets them all (they then count).
const maxExcused = 100_000

// Message is what JetStream says of a consumed message. A handler reads it
// from consume.DeliveryFrom(ctx): Details.(outboxnats.Message); so does a
// consume.WithOnDead callback, from DeadLetter.Delivery.Details.
type Message struct {
	// Stream and Consumer name the stream and the durable consumer.
	Stream   string
	Consumer string
	// Subject is the message's subject.
	Subject string
	// StreamSeq is the message's sequence in the stream; ConsumerSeq the
	// delivery's sequence in the consumer.
	StreamSeq   uint64
	ConsumerSeq uint64
	// NumDelivered is the server's delivery count of this message to the
	// consumer, this delivery included: 1 the first time. It counts every
	// delivery, those that do not count towards consume.WithMaxDeliveries
	// too (consume.Delivery.Attempt is the count that does).
	NumDelivered uint64
	// NumPending is how many messages of the consumer wait behind this one.
	NumPending uint64
	// Timestamp is when the stream stored the message.
	Timestamp time.Time
	// Header and Data are the message's (read them; do not modify).
	Header nats.Header
	Data   []byte
}

// delivery is a consume.Message over a JetStream message.
type delivery struct {
	t    *transport
	keep *keeper
	msg  jetstream.Msg
	md   *jetstream.MsgMetadata
}

// message wraps a fetched message, or, for one that is not a JetStream
// delivery (there is nothing to acknowledge), logs it and returns nil.
func (t *transport) message(m jetstream.Msg) *delivery {
	md, err := m.Metadata()
	if err != nil {
		t.keep.drop(m)
		t.log.Error("outboxnats: not a JetStream message; ignored", "subject", m.Subject(), "error", err)
		return nil
	}
	return &delivery{t: t, keep: t.keep, msg: m, md: md}
}

func (d *delivery) Envelope() (*outbox.Envelope, error) {
	e, err := outbox.DecodeEnvelope(d.msg.Data())
	if err != nil {
		return nil, fmt.Errorf("stream sequence %d: %w", d.md.Sequence.Stream, err)
	}
	return e, nil
}

func (d *delivery) Begin(context.Context) (consume.Start, error) { return consume.Run, nil }

// Delivery counts the attempts from the server's NumDelivered, less the
// deliveries this consumer excused (handed back without a counted run).
func (d *delivery) Delivery() consume.Delivery {
	md := d.md
	d.t.mu.Lock()
	excused := d.t.excused[md.Sequence.Stream]
	d.t.mu.Unlock()
	return consume.Delivery{Attempt: max(int(md.NumDelivered)-excused, 1), Details: Message{
		Stream: md.Stream, Consumer: md.Consumer, Subject: d.msg.Subject(), StreamSeq: md.Sequence.Stream,
		ConsumerSeq: md.Sequence.Consumer, NumDelivered: md.NumDelivered, NumPending: md.NumPending,
		Timestamp: md.Timestamp, Header: d.msg.Headers(), Data: d.msg.Data(),
	}}
}

// Attributes are the span's JetStream attributes.
func (d *delivery) Attributes() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.ConsumerGroup.String(d.md.Consumer),
		semconv.NATSStreamSequence.Int64(int64(d.md.Sequence.Stream)),
		semconv.NATSNumDelivered.Int64(int64(d.md.NumDelivered))}
}

// Ack acknowledges the message and forgets its excused deliveries.
func (d *delivery) Ack(context.Context) error {
	d.keep.drop(d.msg)
	d.forget()
	return d.msg.Ack()
}

// Retry has the message delivered again after delay (NakWithDelay); a
// delivery that does not count is excused, in this consumer's memory.
func (d *delivery) Retry(_ context.Context, delay time.Duration, counted bool) error {
	d.keep.drop(d.msg)
	if !counted {
		d.t.mu.Lock()
		if len(d.t.excused) >= maxExcused {
			clear(d.t.excused)
		}
		d.t.excused[d.md.Sequence.Stream]++
		d.t.mu.Unlock()
	}
	if delay <= 0 {
		return d.msg.Nak()
	}
	return d.msg.NakWithDelay(delay)
}

// Dead publishes the message to the dead-letter subject, if any, and
// terminates it (Term: the server never delivers it again to this
// consumer). When that publish fails, the message is handed back after
// the retry delay instead, to go dead again on a later delivery.
func (d *delivery) Dead(ctx context.Context, reason error) error {
	d.keep.drop(d.msg)
	if d.t.cfg.deadSubject != "" {
		if _, err := d.t.js.PublishMsg(ctx, d.t.deadLetter(d, reason)); err != nil {
			if nerr := d.msg.NakWithDelay(d.t.retryDelay); nerr != nil {
				err = fmt.Errorf("%w; handing it back: %w", err, nerr)
			}
			return fmt.Errorf("outboxnats: publishing to the dead-letter subject %s: %w", d.t.cfg.deadSubject, err)
		}
	}
	d.forget()
	return d.msg.Term()
}

func (d *delivery) forget() {
	d.t.mu.Lock()
	delete(d.t.excused, d.md.Sequence.Stream)
	d.t.mu.Unlock()
}
