package outboxnats

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// deadLetter builds the dead-letter message of d: its data, its headers
// but NATS's own, the Outbox-Dead-… headers, and a Nats-Msg-Id that is the
// same for every dead letter of this stored message from this durable
// consumer (a dead letter published again after a failed Term is dropped
// as a duplicate; the same event published or replayed again is another
// message).
func (t *transport) deadLetter(d *delivery, reason error) *nats.Msg {
	m := nats.NewMsg(t.cfg.deadSubject)
	m.Data = d.msg.Data()
	for k, vs := range d.msg.Headers() {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			m.Header[k] = slices.Clone(vs)
		}
	}
	seq := strconv.FormatUint(d.md.Sequence.Stream, 10)
	id := d.msg.Headers().Get(jetstream.MsgIDHeader) // the event id, for the Publisher's messages
	if id == "" {
		id = d.md.Stream
	}
	m.Header.Set(jetstream.MsgIDHeader, id+":dead:"+d.md.Consumer+":"+seq)
	m.Header.Set(HeaderDeadReason, oneLine(reason.Error()))
	m.Header.Set(HeaderDeadStream, d.md.Stream)
	m.Header.Set(HeaderDeadConsumer, d.md.Consumer)
	m.Header.Set(HeaderDeadSubject, d.msg.Subject())
	m.Header.Set(HeaderDeadSequence, seq)
	m.Header.Set(HeaderDeadDeliveries, strconv.FormatUint(d.md.NumDelivered, 10))
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
