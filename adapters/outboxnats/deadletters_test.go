package outboxnats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
)

// DeadLetters pages through the dead-letter stream, oldest first, without
// changing it, for one dead-letter subject among others; ReplayDead sends
// chosen dead letters back to their subject, where the consumer handles
// them again, and deletes them from the dead-letter stream.
func TestDeadLettersPageAndReplay(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	dead := newStream(t, js) // captures "<dead>.>"
	var refuse atomic.Bool
	refuse.Store(true)
	var s seen
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		if refuse.Load() {
			return outbox.Permanent(errors.New("refused"))
		}
		return nil
	})
	c, err := outboxnats.NewConsumer(js, stream, "dl", h, consumerOpts(t, outboxnats.WithDeadLetterSubject(dead+".dl"))...)
	must(t, err)
	var es []*outbox.Envelope
	for i := range 5 {
		es = append(es, envelope(fmt.Sprint("ev-", i), "x"))
	}
	publishAll(t, js, stream, es...)
	other := nats.NewMsg(dead + ".other") // another consumer's dead letter, in the same stream
	other.Data = []byte("other")
	_, err = js.PublishMsg(t.Context(), other)
	must(t, err)
	run(t, c)
	waitFor(t, 20*time.Second, "five dead letters", func() bool { return streamMsgs(t, js, dead) == 6 })

	dl := outboxnats.NewDeadLetters(js, dead, dead+".dl")
	page, next, err := dl.DeadLetters(t.Context(), "", 3)
	must(t, err)
	rest, last, err := dl.DeadLetters(t.Context(), next, 3)
	must(t, err)
	if len(page) != 3 || len(rest) != 2 || next == "" || last != "" {
		t.Fatalf("pages of %d (next %q) and %d (next %q), want 3 and 2", len(page), next, len(rest), last)
	}
	all := append(page, rest...)
	byEvent := map[string]string{} // event id → dead letter id
	for i, m := range all {
		if m.Envelope == nil || m.Envelope.ID != fmt.Sprint("ev-", i) || m.Source != stream+"/dl "+stream+".x" ||
			!strings.Contains(m.Reason, "refused") || m.Deliveries != 1 || m.DeadAt.IsZero() {
			t.Errorf("dead letter %d: %+v", i, m)
			continue
		}
		byEvent[m.Envelope.ID] = m.ID
	}
	if n := streamMsgs(t, js, dead); n != 6 {
		t.Errorf("reading left %d messages in the dead-letter stream, want 6", n)
	}

	refuse.Store(false)
	n, err := dl.ReplayDead(t.Context(), byEvent["ev-1"], byEvent["ev-3"], "999", "not a sequence", "1")
	if err != nil || n != 2 {
		t.Fatalf("ReplayDead: %d, %v; want 2 (the other subject's and unknown sequences skipped)", n, err)
	}
	waitFor(t, 20*time.Second, "the replayed events handled", func() bool { return s.runs() == 7 })
	var left []string
	for _, m := range readDead(t, dl, 10) {
		left = append(left, m.Envelope.ID)
	}
	if strings.Join(left, " ") != "ev-0 ev-2 ev-4" || streamMsgs(t, js, dead) != 4 {
		t.Errorf("after the replay, dead letters %v (%d in the stream)", left, streamMsgs(t, js, dead))
	}
	n, err = dl.ReplayDead(t.Context(), byEvent["ev-1"])
	if n != 0 || err != nil {
		t.Errorf("replaying a replayed dead letter again: %d, %v; want 0, nil", n, err)
	}
}

// Dead letters of one stored message are published once, whatever the
// retries of a failed Term; the same event stored twice (published again
// after the duplicate window, or replayed) and dead twice is two dead
// letters.
func TestDeadLetterIDs(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js, func(c *jetstream.StreamConfig) { c.Duplicates = 500 * time.Millisecond })
	dead := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "ids", consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		return outbox.Permanent(errors.New("refused"))
	}), consumerOpts(t, outboxnats.WithDeadLetterSubject(dead+".ids"))...)
	must(t, err)
	publishAll(t, js, stream, envelope("ev-twice", "x"))
	time.Sleep(1500 * time.Millisecond) // past the duplicate window: stored again
	publishAll(t, js, stream, envelope("ev-twice", "x"))
	if n := streamMsgs(t, js, stream); n != 2 {
		t.Fatalf("the stream holds %d messages of the event, want 2", n)
	}
	run(t, c)
	waitFor(t, 20*time.Second, "two dead letters", func() bool { return streamMsgs(t, js, dead) == 2 })
	ds, err := js.Stream(t.Context(), dead)
	must(t, err)
	m, err := ds.GetMsg(t.Context(), 1)
	must(t, err)
	again := nats.NewMsg(dead + ".ids") // a dead letter published again after a failed Term
	again.Header = m.Header
	again.Data = m.Data
	_, err = js.PublishMsg(t.Context(), again)
	must(t, err)
	if n := streamMsgs(t, js, dead); n != 2 {
		t.Errorf("the dead-letter stream holds %d messages, want 2", n)
	}
}
