package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/consume"
)

// DeadLetters pages through a dead-letter queue in its order without
// taking the messages, and ReplayDead sends chosen ones back where they
// were published: they are consumed again and leave the dead-letter queue.
func TestDeadLettersPageAndReplay(t *testing.T) {
	q, dlq, _ := deadLettered(t, "dl")
	var es []*outbox.Envelope
	for i := range 5 {
		es = append(es, envelope(fmt.Sprint("ev-", i), "t", q))
	}
	publish(t, q, es...)
	must(t, admin(t).Publish("", q, false, false, amqp.Publishing{Body: []byte("not an event")}))
	var refuse atomic.Bool
	refuse.Store(true)
	seen := newCalls()
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		seen.add(ctx, e)
		if refuse.Load() {
			return outbox.Permanent(errors.New("refused"))
		}
		return nil
	})
	runConsumer(t, newConsumer(t, dial(t), q, h))
	eventually(t, 10*time.Second, "six dead messages", func() bool { return depth(t, dlq) == 6 })

	dl := outboxamqp.NewDeadLetters(dial(t), dlq)
	page, next, err := dl.DeadLetters(t.Context(), "", 4)
	must(t, err)
	rest, last, err := dl.DeadLetters(t.Context(), next, 4)
	must(t, err)
	if next != "4" || last != "" || len(page) != 4 || len(rest) != 2 {
		t.Fatalf("pages of %d (next %q) and %d (next %q), want 4 and 2", len(page), next, len(rest), last)
	}
	all := append(page, rest...)
	order := ids(all) // the order they died in
	if again := ids(readAll(t, dl)); again != order || len(all) != 6 {
		t.Errorf("dead letters %s, then %s: reading changed the queue's order", order, again)
	}
	for _, m := range all {
		if m.Source != q || m.DeadAt.IsZero() || !strings.Contains(m.Reason, "rejected") {
			t.Errorf("dead letter %+v", m)
		}
		if (m.Envelope == nil) != strings.HasPrefix(m.ID, "sha256:") || (m.Envelope != nil && m.Envelope.ID != m.ID) {
			t.Errorf("dead letter %s decoded as %+v", m.ID, m.Envelope)
		}
	}
	if n := depth(t, dlq); n != 6 {
		t.Errorf("reading left %d messages in the dead-letter queue, want 6", n)
	}

	refuse.Store(false)
	n, err := dl.ReplayDead(t.Context(), "ev-1", "ev-3", "missing")
	if err != nil || n != 2 {
		t.Fatalf("ReplayDead: %d, %v; want 2", n, err)
	}
	eventually(t, 10*time.Second, "the replayed events handled", func() bool { return seen.of("ev-1") == 2 && seen.of("ev-3") == 2 })
	want := strings.Join(strings.Fields(strings.NewReplacer("ev-1", "", "ev-3", "").Replace(order)), " ")
	if got := ids(readAll(t, dl)); got != want {
		t.Errorf("after the replay, dead letters %s, want %s", got, want)
	}
	if seen.of("ev-0") != 1 {
		t.Errorf("ev-0 handled %d times: replayed though not asked", seen.of("ev-0"))
	}
}

// A message put in the dead-letter queue by hand has no x-death header:
// ReplayDead says so and leaves it there.
func TestReplayDeadNeedsXDeath(t *testing.T) {
	_, dlq, _ := deadLettered(t, "dl-hand")
	must(t, admin(t).Publish("", dlq, false, false, amqp.Publishing{MessageId: "by-hand", Body: []byte("{}")}))
	eventually(t, 5*time.Second, "the message queued", func() bool { return depth(t, dlq) == 1 })
	dl := outboxamqp.NewDeadLetters(dial(t), dlq)
	if n, err := dl.ReplayDead(t.Context(), "by-hand"); n != 0 || err == nil || !strings.Contains(err.Error(), "x-death") {
		t.Errorf("ReplayDead: %d, %v; want 0 and an error naming x-death", n, err)
	}
	if got := ids(readAll(t, dl)); got != "by-hand" {
		t.Errorf("dead letters %s after a failed replay", got)
	}
}

func readAll(t testing.TB, dl *outboxamqp.DeadLetters) []consume.DeadMessage {
	t.Helper()
	page, next, err := dl.DeadLetters(t.Context(), "", 0)
	must(t, err)
	if next != "" {
		t.Fatalf("more than a page of dead letters")
	}
	return page
}

// ids lists the messages' ids, digests cut to their prefix.
func ids(ms []consume.DeadMessage) string {
	var s []string
	for _, m := range ms {
		id, _, _ := strings.Cut(m.ID, ":")
		if id == "sha256" {
			id += ":"
		} else {
			id = m.ID
		}
		s = append(s, id)
	}
	return strings.Join(s, " ")
}
