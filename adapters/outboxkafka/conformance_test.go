package outboxkafka_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/consume/consumetest"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// conformanceSeedsEnv hands the kfake cluster of TestConformance to the
// relay that its RelayKilledMidBatch case runs as a child process.
const conformanceSeedsEnv = "OUTBOX_KAFKA_CONFORMANCE_SEEDS"

// TestConformance runs the consumer kit's conformance suite against a
// kfake cluster of 3 brokers, and a real cluster with OUTBOX_KAFKA_BROKERS:
// no case skipped, key order checked across consumers (by partition), the
// outage a network cut of every client.
func TestConformance(t *testing.T) {
	t.Run("kfake", func(t *testing.T) {
		var c *cluster
		if seeds := os.Getenv(conformanceSeedsEnv); seeds != "" {
			c = &cluster{name: "kfake", brokers: strings.Split(seeds, ",")} // the child's
		} else {
			c = newFake(t)
			t.Setenv(conformanceSeedsEnv, strings.Join(c.seeds(), ","))
		}
		consumetest.Exercise(t, harness(c))
	})
	t.Run("kafka", func(t *testing.T) { consumetest.Exercise(t, harness(realCluster(t))) })
}

// harness is the suite's view of cluster c: every client made through one
// network that Outage cuts.
func harness(c *cluster) consumetest.Harness {
	net := &network{}
	return consumetest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			return newPublisher(t, c.client(t, kgo.Dialer(net.dial), kgo.RequestTimeoutOverhead(time.Second), kgo.ProducerLinger(0)),
				outboxkafka.WithAckTimeout(500*time.Millisecond))
		},
		NewDest: func(t testing.TB) string {
			topic := c.topic(t, 4, nil)
			c.topicNamed(t, topic+".dead", 2, nil)
			return topic
		},
		NewConsumer: func(t testing.TB, dest, name string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
			cons, err := outboxkafka.NewConsumer(consumerOpts(c, kgo.Dialer(net.dial), kgo.ClientID(name)), dest, dest, h,
				append(opts, outboxkafka.WithDeadLetterTopic(dest+".dead"))...)
			must(t, err)
			return cons
		},
		DeadLetters: func(t testing.TB, dest string) []string {
			page, _, err := outboxkafka.NewDeadLetters(c.clientOpts(), dest+".dead").DeadLetters(context.Background(), "", 1000)
			must(t, err)
			ids := make([]string, 0, len(page))
			for _, m := range page {
				ids = append(ids, m.Envelope.ID)
			}
			return ids
		},
		Outage: func(testing.TB) func() {
			net.Cut()
			return net.Restore
		},
		KeyOrderAcrossConsumers: true,
		Skip:                    longFaultCases(),
	}
}

// longFaultCases are the suite's cases that kill a relay, cut the
// network or take the consumers' database away (about 12 s of the
// suite's 15 on kfake): run only with OUTBOX_FAULT_SUITE=1, as .ci/run
// sets, and skipped, naming the variable, otherwise.
func longFaultCases() map[string]string {
	if testenv.FaultSuite() {
		return nil
	}
	return map[string]string{
		"RelayKilledMidBatch": testenv.FaultSuiteSkip,
		"BrokerOutage":        testenv.FaultSuiteSkip,
		"DependencyDown":      testenv.FaultSuiteSkip,
	}
}

// consumerOpts are the client options of the tests' consumers: the
// cluster's, with a group that notices a rebalance at once and fetches
// that return soon.
func consumerOpts(c *cluster, opts ...kgo.Opt) []kgo.Opt {
	return c.clientOpts(append([]kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)},
		opts...)...)
}
