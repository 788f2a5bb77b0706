package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/relay"
)

// natsPublisher publishes to NATS JetStream through adapters/outboxnats:
// each event on the subject its Topic names (after --subject-prefix), or
// --subject, with Nats-Msg-Id the event id, acknowledged by the stream. The
// connection reconnects for ever, and is retried when the server is down
// at start: meanwhile every publish is outbox.Unavailable.
func (f *relayFlags) natsPublisher(log *slog.Logger) (relay.Publisher, func(), error) {
	us, err := f.brokerURLs("--nats-url", &f.natsURL, "OUTBOX_NATS", "nats://[user:password@]host:4222[,nats://…]", "nats", "tls", "ws", "wss")
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(f.natsURL, nats.Name(strings.TrimSpace("outbox relay "+f.workerID)),
		nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed by the relay
				log.Warn("NATS connection lost", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS connected", "url", nc.ConnectedUrlRedacted()) }))
	if err != nil {
		return nil, nil, fmt.Errorf("--nats-url %s: %s", maskUserinfo(f.natsURL), f.c.secrets.scrub(err.Error()))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("NATS JetStream: %w", err)
	}
	opts := []outboxnats.Option{outboxnats.WithSource(f.source), outboxnats.WithLogger(log), outboxnats.WithDefaultSubject(f.subject)}
	if f.subjectPrefix != "" {
		opts = append(opts, outboxnats.WithSubjectPrefix(f.subjectPrefix))
	}
	pub, err := outboxnats.NewPublisher(js, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, usagef("%v", err)
	}
	desc := pub.Describe()
	if !strings.Contains(desc, " on ") { // not connected yet: the URLs' addresses
		desc += " on " + hosts(us)
	}
	return describedNATS{pub, desc}, nc.Close, nil
}

// describedNATS is the NATS publisher described with the servers'
// addresses while it is not connected.
type describedNATS struct {
	*outboxnats.Publisher
	desc string
}

// Describe implements relay.Describer.
func (d describedNATS) Describe() string { return d.desc }
