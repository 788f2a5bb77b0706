package main

import (
	"log/slog"
	"net"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/relay"
)

// kafkaLayouts are the values of --kafka-layout.
var kafkaLayouts = map[string]outboxkafka.Layout{
	"structured": outboxkafka.Structured, "binary": outboxkafka.Binary, "debezium": outboxkafka.Debezium,
}

// kafkaPublisher produces to Kafka through adapters/outboxkafka: one
// record per event, to its Topic or --topic, keyed by its partition key
// (else its aggregate id), a claimed batch produced at once. An
// unreachable cluster is outbox.Unavailable (no attempt spent); an event
// without a topic, or one the brokers refuse, is dead at once.
func (f *relayFlags) kafkaPublisher(log *slog.Logger) (relay.Publisher, func(), error) {
	if f.kafkaBrokers == "" {
		f.kafkaBrokers = f.c.getenv("OUTBOX_KAFKA")
	}
	if f.kafkaBrokers == "" {
		return nil, nil, usagef("--to kafka needs --kafka-brokers (or OUTBOX_KAFKA)")
	}
	seeds := strings.Split(f.kafkaBrokers, ",")
	for i, s := range seeds {
		seeds[i] = strings.TrimSpace(s)
		if host, port, err := net.SplitHostPort(seeds[i]); err != nil || host == "" || port == "" {
			return nil, nil, usagef("--kafka-brokers %q: want host:port[,host:port…]", f.kafkaBrokers)
		}
	}
	layout, ok := kafkaLayouts[f.kafkaLayout]
	if !ok {
		return nil, nil, usagef("--kafka-layout %q: want structured, binary or debezium", f.kafkaLayout)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0),
		kgo.ClientID(strings.TrimSpace("outbox-relay "+f.workerID)))
	if err != nil {
		return nil, nil, usagef("--kafka-brokers %q: %v", f.kafkaBrokers, err)
	}
	opts := []outboxkafka.Option{outboxkafka.WithSource(f.source), outboxkafka.WithLogger(log), outboxkafka.WithLayout(layout)}
	if f.topic != "" {
		opts = append(opts, outboxkafka.WithTopic(f.topic))
	}
	pub, err := outboxkafka.NewPublisher(cl, opts...)
	if err != nil {
		cl.Close()
		return nil, nil, usagef("%v", err)
	}
	return pub, cl.Close, nil
}
