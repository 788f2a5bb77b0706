package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
)

// DefaultDeadLettersPage is the page size of DeadLetters for a limit of 0
// or less.
const DefaultDeadLettersPage = 50

// DeadLetters reads the stream that captures consumers' dead-letter
// subjects (WithDeadLetterSubject), for the admin page and the CLI: it
// implements consume.DeadLetterReader and consume.DeadLetterReplayer.
// Reading gets stored messages by sequence (GetMsg) and changes nothing.
type DeadLetters struct {
	js      jetstream.JetStream
	stream  string
	subject string
}

var (
	_ consume.DeadLetterReader   = (*DeadLetters)(nil)
	_ consume.DeadLetterReplayer = (*DeadLetters)(nil)
)

// NewDeadLetters returns a reader of the dead letters in stream whose
// subject matches subject (wildcards allowed; "" for every message of the
// stream).
func NewDeadLetters(js jetstream.JetStream, stream, subject string) *DeadLetters {
	if subject == "" {
		subject = ">"
	}
	return &DeadLetters{js: js, stream: stream, subject: subject}
}

// DeadLetters returns up to limit dead messages after cursor ("" for the
// first page), oldest first, and the cursor of the next page ("" when
// there is none). A message's ID is its sequence in the dead-letter
// stream; its Source ("<stream>/<durable> <subject>"), Reason and
// Deliveries come from the Outbox-Dead-… headers, its DeadAt is when the
// stream stored it.
func (r *DeadLetters) DeadLetters(ctx context.Context, cursor string, limit int) ([]consume.DeadMessage, string, error) {
	seq := uint64(1)
	if cursor != "" {
		n, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil || n == 0 {
			return nil, "", fmt.Errorf("outboxnats: dead letters of %s: bad cursor %q", r.stream, cursor)
		}
		seq = n
	}
	if limit <= 0 {
		limit = DefaultDeadLettersPage
	}
	s, err := r.js.Stream(ctx, r.stream)
	if err != nil {
		return nil, "", fmt.Errorf("outboxnats: dead-letter stream %s: %w", r.stream, err)
	}
	var page []consume.DeadMessage
	for {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(r.subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return page, "", nil
		case err != nil:
			return nil, "", fmt.Errorf("outboxnats: reading dead-letter stream %s at %d: %w", r.stream, seq, err)
		case len(page) == limit:
			return page, strconv.FormatUint(m.Sequence, 10), nil
		}
		page = append(page, deadMessage(m))
		seq = m.Sequence + 1
	}
}

// deadMessage describes a dead letter for consume.DeadMessage.
func deadMessage(m *jetstream.RawStreamMsg) consume.DeadMessage {
	h := m.Header
	d := consume.DeadMessage{
		ID:     strconv.FormatUint(m.Sequence, 10),
		Source: h.Get(HeaderDeadStream) + "/" + h.Get(HeaderDeadConsumer) + " " + h.Get(HeaderDeadSubject),
		Reason: h.Get(HeaderDeadReason),
		DeadAt: m.Time,
	}
	d.Deliveries, _ = strconv.Atoi(h.Get(HeaderDeadDeliveries))
	if e, err := outbox.DecodeEnvelope(m.Data); err == nil {
		d.Envelope = e
	}
	return d
}

// ReplayDead publishes the dead letters of ids (their sequences) again to
// the subject they went dead from (HeaderDeadSubject), with their data and
// headers but the Outbox-Dead-… ones, and deletes them from the
// dead-letter stream. It returns how many it replayed; ids not in the
// stream (or not of the reader's subject) are skipped. Every consumer of
// that subject receives a replayed message, not only the one where it went
// dead: idempotent handlers skip it where it was handled. Its Nats-Msg-Id
// is the dead letter's with ":replay", so that the stream's duplicate
// window does not drop it as the event's first copy, and a replay retried
// after a failed delete is dropped.
func (r *DeadLetters) ReplayDead(ctx context.Context, ids ...string) (int, error) {
	s, err := r.js.Stream(ctx, r.stream)
	if err != nil {
		return 0, fmt.Errorf("outboxnats: dead-letter stream %s: %w", r.stream, err)
	}
	n := 0
	var errs []error
	for _, id := range ids {
		seq, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			continue
		}
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(r.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && m.Sequence != seq) {
			continue
		}
		if err == nil {
			err = r.replay(ctx, s, m)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("outboxnats: replaying dead letter %d of %s: %w", seq, r.stream, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// replay publishes m again to its original subject, then deletes it.
func (r *DeadLetters) replay(ctx context.Context, s jetstream.Stream, m *jetstream.RawStreamMsg) error {
	subject := m.Header.Get(HeaderDeadSubject)
	if subject == "" {
		return fmt.Errorf("no %s header: not a dead letter of this package", HeaderDeadSubject)
	}
	out := nats.NewMsg(subject)
	out.Data = m.Data
	for k, vs := range m.Header {
		lower := strings.ToLower(k)
		if !strings.HasPrefix(lower, "nats-") && !strings.HasPrefix(lower, "outbox-dead-") {
			out.Header[k] = vs
		}
	}
	id := m.Header.Get(jetstream.MsgIDHeader)
	if id == "" {
		id = r.stream + ":" + strconv.FormatUint(m.Sequence, 10)
	}
	out.Header.Set(jetstream.MsgIDHeader, id+":replay")
	if _, err := r.js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("publishing to %s: %w", subject, err)
	}
	return s.DeleteMsg(ctx, m.Sequence)
}
