package outboxamqp_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/consume/consumetest"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// TestConformance runs package consumetest's suite against RabbitMQ: every
// publisher and consumer dials through a proxy that the outage case cuts,
// and each consumer declares its queue and dead-letter queue
// (WithConsumerTopology); the dead letters are read with DeadLetters.
func TestConformance(t *testing.T) {
	proxy := testenv.NewProxy(t, brokerAddr(t))
	dialer := outboxamqp.Dialer(viaProxy(t, proxy), amqp.Config{})
	topologies := map[string]func(*amqp.Channel) error{}
	consumetest.Exercise(t, consumetest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			return newPublisher(t, nil, outboxamqp.WithDial(dialer))
		},
		NewDest: func(t testing.TB) string {
			q, _, declare := deadLettered(t, "ct")
			topologies[q] = declare
			return q
		},
		NewConsumer: func(t testing.TB, dest, name string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
			declare := topologies[dest]
			if declare == nil { // a child process: the parent declared it
				declare = func(*amqp.Channel) error { return nil }
			}
			c, err := outboxamqp.NewConsumer(nil, dest, h, append([]consume.Option{outboxamqp.WithConsumerDial(dialer),
				outboxamqp.WithConsumerTopology(declare), outboxamqp.WithConsumerTag("consumetest-" + name)}, opts...)...)
			must(t, err)
			return c
		},
		DeadLetters: func(t testing.TB, dest string) []string {
			return deadIDs(t, outboxamqp.NewDeadLetters(dial(t), dest+".dead"))
		},
		Outage: func(testing.TB) func() {
			proxy.Cut()
			return proxy.Restore
		},
	})
}

// deadIDs reads every page of dl and returns the event ids.
func deadIDs(t testing.TB, dl consume.DeadLetterReader) []string {
	t.Helper()
	var ids []string
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(context.Background(), cursor, 2)
		must(t, err)
		for _, m := range page {
			ids = append(ids, m.ID)
		}
		if cursor = next; cursor == "" {
			return ids
		}
	}
}
