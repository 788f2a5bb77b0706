package outboxnats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
)

// TestPublishServerDown stops a throw-away server under a Publisher: every
// event fails at once as outbox.Unavailable (nothing is left in the
// client's reconnect buffer), and publishing works again once the server
// is back.
func TestPublishServerDown(t *testing.T) {
	srv := startServer(t, "-js")
	nc := connect(t, srv.URL())
	js, err := jetstream.New(nc)
	must(t, err)
	stream := newStream(t, js)
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."))
	ctx := context.Background()
	must(t, p.Publish(ctx, envelope("before", "x")))

	srv.stop()
	waitFor(t, 10*time.Second, "the client to see the server gone", func() bool { return !nc.IsConnected() })
	began := time.Now()
	for i, err := range p.PublishBatch(ctx, []*outbox.Envelope{envelope("down-1", "x"), envelope("down-2", "x")}) {
		if !outbox.IsUnavailable(err) || !errors.Is(err, nats.ErrDisconnected) {
			t.Errorf("event %d while the server is down: %v, want outbox.Unavailable wrapping nats.ErrDisconnected", i, err)
		}
	}
	if took := time.Since(began); took > outboxnats.DefaultAckTimeout/2 {
		t.Errorf("PublishBatch took %v with the server down; it should not wait for acknowledgements", took)
	}

	srv.start()
	waitFor(t, 20*time.Second, "the client to reconnect", nc.IsConnected)
	waitFor(t, 20*time.Second, "the stream to take messages again", func() bool {
		return p.Publish(ctx, envelope("after", "x")) == nil
	})
	if n := streamMsgs(t, js, stream); n != 2 {
		t.Errorf("stream holds %d messages, want 2 (before and after; nothing of the outage)", n)
	}
}

// TestPublishClosedConnection publishes on a closed connection: the
// transport is down, not the event.
func TestPublishClosedConnection(t *testing.T) {
	nc := connect(t, natsURL(t))
	js, err := jetstream.New(nc)
	must(t, err)
	p := newPublisher(t, js)
	nc.Close()
	err = p.Publish(context.Background(), envelope("closed", "x"))
	if !outbox.IsUnavailable(err) {
		t.Errorf("closed connection: %v, want outbox.Unavailable", err)
	}
}

// TestPublishNoJetStream publishes to a server without JetStream: no
// stream answers and JetStream does not say which one should, so the
// transport is unavailable (not ErrNoStream).
func TestPublishNoJetStream(t *testing.T) {
	srv := startServer(t) // no -js
	js, err := jetstream.New(connect(t, srv.URL()))
	must(t, err)
	p := newPublisher(t, js)
	err = p.Publish(context.Background(), envelope("nojs", "x"))
	if !outbox.IsUnavailable(err) || errors.Is(err, outboxnats.ErrNoStream) {
		t.Errorf("server without JetStream: %v, want outbox.Unavailable, not ErrNoStream", err)
	}
}

// TestPublishAckTimeout publishes to a subject whose only responder never
// answers (a plain subscriber standing in for a stuck stream): the wait
// ends at the ack timeout, as an outage.
func TestPublishAckTimeout(t *testing.T) {
	nc := connect(t, natsURL(t))
	js, err := jetstream.New(nc)
	must(t, err)
	subject := "on-silent-" + time.Now().Format("150405.000000")
	sub, err := nc.SubscribeSync(subject) // takes the message, never replies
	must(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	p := newPublisher(t, js, outboxnats.WithDefaultSubject(subject), outboxnats.WithAckTimeout(300*time.Millisecond))
	began := time.Now()
	err = p.Publish(context.Background(), envelope("silent", ""))
	if !outbox.IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no acknowledgement: %v, want outbox.Unavailable wrapping context.DeadlineExceeded", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("PublishBatch waited %v for a 300ms ack timeout", took)
	}
}
