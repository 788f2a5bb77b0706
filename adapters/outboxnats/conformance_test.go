package outboxnats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/consume/consumetest"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// TestConformance runs package consumetest's suite against NATS
// JetStream: every publisher and consumer connects through a proxy that
// the outage case cuts; a destination is a stream capturing one subject
// (its Topic), with a 10-minute duplicate window, and a second stream for
// its consumers' dead-letter subject, read with DeadLetters.
func TestConformance(t *testing.T) {
	proxy := testenv.NewProxy(t, strings.TrimPrefix(natsURL(t), "nats://"))
	viaProxy := func(t testing.TB) jetstream.JetStream {
		js, err := jetstream.New(connect(t, "nats://"+proxy.Addr()))
		must(t, err)
		return js
	}
	admin := newJS(t)
	consumetest.Exercise(t, consumetest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher { return newPublisher(t, viaProxy(t)) },
		NewDest: func(t testing.TB) string {
			dest := newStream(t, admin, func(c *jetstream.StreamConfig) { c.Subjects = []string{c.Name} })
			newStream(t, admin, func(c *jetstream.StreamConfig) { c.Name, c.Subjects = dest+"-dead", []string{dest + "-dead"} })
			return dest
		},
		NewConsumer: func(t testing.TB, dest, _ string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
			// One durable shared by the consumers of dest.
			c, err := outboxnats.NewConsumer(viaProxy(t), dest, "consumetest", h, append([]consume.Option{
				outboxnats.WithDeadLetterSubject(dest + "-dead"), outboxnats.WithFetchWait(200 * time.Millisecond)}, opts...)...)
			must(t, err)
			return c
		},
		DeadLetters: func(t testing.TB, dest string) []string {
			var ids []string
			for _, m := range readDead(t, outboxnats.NewDeadLetters(admin, dest+"-dead", ""), 2) {
				ids = append(ids, m.Envelope.ID)
			}
			return ids
		},
		Outage: func(testing.TB) func() {
			proxy.Cut()
			return proxy.Restore
		},
		BrokerDedupes: true,
	})
}

// readDead reads every page of dl, limit messages at a time.
func readDead(t testing.TB, dl consume.DeadLetterReader, limit int) []consume.DeadMessage {
	t.Helper()
	var all []consume.DeadMessage
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(context.Background(), cursor, limit)
		must(t, err)
		all = append(all, page...)
		if cursor = next; cursor == "" {
			return all
		}
	}
}
