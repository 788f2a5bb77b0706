package main

import (
	"log/slog"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/relay"
)

// amqpPublisher publishes to RabbitMQ through adapters/outboxamqp: one
// persistent message per event, confirmed by the broker, on a connection
// dialled at the first publish and again after it closes (until then
// every publish is outbox.Unavailable: the relay spends no attempt).
func (f *relayFlags) amqpPublisher(log *slog.Logger) (relay.Publisher, func(), error) {
	us, err := f.brokerURLs("--amqp-url", &f.amqpURL, "OUTBOX_AMQP", "amqp://user:password@host:5672/vhost", "amqp", "amqps")
	if err != nil {
		return nil, nil, err
	}
	if len(us) != 1 {
		return nil, nil, usagef("--amqp-url %s: one URL, not %d", maskUserinfo(f.amqpURL), len(us))
	}
	uri, err := amqp.ParseURI(f.amqpURL)
	if err != nil {
		return nil, nil, usagef("--amqp-url %s: %s", maskUserinfo(f.amqpURL), f.c.secrets.scrub(err.Error()))
	}
	cfg := amqp.Config{Properties: amqp.NewConnectionProperties()}
	cfg.Properties.SetClientConnectionName(strings.TrimSpace("outbox relay " + f.workerID))
	opts := []outboxamqp.Option{outboxamqp.WithSource(f.source), outboxamqp.WithLogger(log),
		outboxamqp.WithDial(outboxamqp.Dialer(f.amqpURL, cfg))}
	if f.exchange != "" {
		opts = append(opts, outboxamqp.WithExchange(f.exchange))
	}
	pub, err := outboxamqp.NewPublisher(nil, opts...)
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	desc := pub.Describe()
	if !strings.Contains(desc, " on ") { // not connected yet: the URL's address
		desc += " on " + us[0].Host
		if uri.Vhost != "/" {
			desc += "/" + uri.Vhost
		}
	}
	return describedAMQP{pub, desc}, func() { _ = pub.Close() }, nil
}

// describedAMQP is the RabbitMQ publisher described with the broker's
// address before its first connection.
type describedAMQP struct {
	*outboxamqp.Publisher
	desc string
}

// Describe implements relay.Describer.
func (d describedAMQP) Describe() string { return d.desc }
