package outboxnats

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
)

// Headers added to a message published to the dead-letter subject.
const (
	// HeaderDeadReason holds why the message is dead (the error, on one
	// line).
	HeaderDeadReason = "Outbox-Dead-Reason"
	// HeaderDeadStream and HeaderDeadConsumer name the stream and the
	// durable consumer the message went dead in.
	HeaderDeadStream   = "Outbox-Dead-Stream"
	HeaderDeadConsumer = "Outbox-Dead-Consumer"
	// HeaderDeadSubject holds the message's original subject.
	HeaderDeadSubject = "Outbox-Dead-Subject"
	// HeaderDeadSequence holds its sequence in the stream.
	HeaderDeadSequence = "Outbox-Dead-Sequence"
	// HeaderDeadDeliveries holds the server's delivery count
	// (NumDelivered) when it went dead.
	HeaderDeadDeliveries = "Outbox-Dead-Deliveries"
)

// DeadMessage is a message that will not be handled again: malformed,
// failed with outbox.Permanent, or failed its last attempt
// (WithMaxDeliveries).
type DeadMessage struct {
	// Stream and Consumer name the stream and the durable consumer.
	Stream   string
	Consumer string
	// Subject is the message's subject, StreamSeq its stream sequence.
	Subject   string
	StreamSeq uint64
	// Data and Header are the message's as delivered.
	Data   []byte
	Header nats.Header
	// Envelope is the decoded event, or nil for a malformed message.
	Envelope *outbox.Envelope
	// NumDelivered is the server's delivery count when it went dead.
	NumDelivered uint64
	// Reason wraps the handler's error, ErrMalformed or ErrTooManyDeliveries.
	Reason error
}

// dead logs the message at error level, publishes it to the dead-letter
// subject (if any), terminates it (Term: the server never delivers it
// again to this consumer) and calls the OnDead callback. If the
// dead-letter publish fails, the message is handed back instead, to go
// dead again on a later delivery.
func (c *Consumer) dead(ctx context.Context, msg jetstream.Msg, d Delivery, env *outbox.Envelope, reason error) {
	attrs := []any{"stream_seq", d.StreamSeq, "subject", d.Subject, "num_delivered", d.NumDelivered, "reason", reason}
	if env != nil {
		attrs = append(attrs, "event_id", env.ID, "event_type", env.Type)
	}
	c.log.Error("outboxnats: message dead; terminated without success", attrs...)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if c.cfg.deadSubject != "" {
		if _, err := c.js.PublishMsg(actx, c.deadLetter(msg, d, env, reason)); err != nil {
			c.log.Error("outboxnats: dead-letter publish failed; the message will be delivered again",
				append(attrs, "dead_letter_subject", c.cfg.deadSubject, "error", err)...)
			if err := msg.NakWithDelay(c.cfg.retryDelay); err != nil {
				c.log.Warn("outboxnats: NAK failed; delivered again after the ack wait", append(attrs, "error", err)...)
			}
			return
		}
	}
	delete(c.excused, d.StreamSeq)
	if err := msg.Term(); err != nil {
		c.log.Warn("outboxnats: TERM failed; the message will be delivered again and go dead again", append(attrs, "error", err)...)
		return
	}
	if c.cfg.onDead != nil {
		c.cfg.onDead(actx, DeadMessage{
			Stream: d.Stream, Consumer: d.Consumer, Subject: d.Subject, StreamSeq: d.StreamSeq,
			Data: msg.Data(), Header: msg.Headers(), Envelope: env, NumDelivered: d.NumDelivered, Reason: reason,
		})
	}
}

// deadLetter builds the dead-letter message of msg: its data, its headers
// but NATS's own, the Outbox-Dead-… headers, and a Nats-Msg-Id that is the
// same for every dead letter of the event from this durable consumer.
func (c *Consumer) deadLetter(msg jetstream.Msg, d Delivery, env *outbox.Envelope, reason error) *nats.Msg {
	m := nats.NewMsg(c.cfg.deadSubject)
	m.Data = msg.Data()
	for k, vs := range msg.Headers() {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			m.Header[k] = slices.Clone(vs)
		}
	}
	id := d.Stream + ":" + strconv.FormatUint(d.StreamSeq, 10)
	if env != nil && headerValueOK(env.ID) {
		id = env.ID
	}
	m.Header.Set(jetstream.MsgIDHeader, id+":dead:"+c.durable)
	m.Header.Set(HeaderDeadReason, oneLine(reason.Error()))
	m.Header.Set(HeaderDeadStream, d.Stream)
	m.Header.Set(HeaderDeadConsumer, d.Consumer)
	m.Header.Set(HeaderDeadSubject, d.Subject)
	m.Header.Set(HeaderDeadSequence, strconv.FormatUint(d.StreamSeq, 10))
	m.Header.Set(HeaderDeadDeliveries, strconv.FormatUint(d.NumDelivered, 10))
	return m
}

// oneLine replaces the control characters of s (line breaks) with spaces,
// for a header value.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// String names the dead message, for logs and tests.
func (d DeadMessage) String() string {
	id := "?"
	if d.Envelope != nil {
		id = d.Envelope.ID
	}
	return fmt.Sprintf("%s/%s seq %d (event %s): %v", d.Stream, d.Consumer, d.StreamSeq, id, d.Reason)
}
