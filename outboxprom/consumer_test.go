package outboxprom_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/outboxprom"
)

// A consumer given ConsumerOption reports its messages, by outcome, and
// its handler runs on the page; the page has no consumer series before
// (the control).
func TestConsumerMetricsOnThePage(t *testing.T) {
	m, err := outboxprom.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if page := scrape(t, m); strings.Contains(page, "outbox_consumer") {
		t.Fatalf("before the consumer ran, the page is:\n%s", page)
	}
	h := consume.HandlerFunc(func(_ context.Context, e *outbox.Envelope) error {
		if e.ID == "bad" {
			return errors.New("fails")
		}
		return nil
	})
	c, err := consume.New(oneBatch{}, h, m.ConsumerOption(), consume.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	c.Process(context.Background(), &msg{id: "ok"})
	c.Process(context.Background(), &msg{id: "bad"})
	page := scrape(t, m)
	for _, outcome := range []string{"acked", "retried"} {
		if !lineWith(page, "outbox_consumer_messages_total{", `outbox_outcome="`+outcome+`"`, `messaging_system="test"`, "} 1") {
			t.Errorf("no %s message counted:\n%s", outcome, grep(page, "outbox_consumer"))
		}
	}
	if got, ok := sample(page, "outbox_consumer_handle_duration_seconds_count"); !ok || got != 2 {
		t.Errorf("handler runs %v (found %v), want 2", got, ok)
	}
}

// lineWith reports whether a line of page starts with prefix and holds
// every part.
func lineWith(page, prefix string, parts ...string) bool {
	for _, l := range strings.Split(page, "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// oneBatch is a transport whose messages are handed to Process.
type oneBatch struct{}

func (oneBatch) System() string                                     { return "test" }
func (oneBatch) Destination() string                                { return "q" }
func (oneBatch) Receive(context.Context) ([]consume.Message, error) { return nil, nil }

type msg struct{ id string }

func (m *msg) Envelope() (*outbox.Envelope, error) {
	b, _ := json.Marshal(&outbox.Envelope{ID: m.id, Type: "t", Source: "s", CreatedAt: time.Now()})
	return outbox.DecodeEnvelope(b)
}
func (m *msg) Begin(context.Context) (consume.Start, error)     { return consume.Run, nil }
func (m *msg) Delivery() consume.Delivery                       { return consume.Delivery{Attempt: 1} }
func (m *msg) Ack(context.Context) error                        { return nil }
func (m *msg) Retry(context.Context, time.Duration, bool) error { return nil }
func (m *msg) Dead(context.Context, error) error                { return nil }
