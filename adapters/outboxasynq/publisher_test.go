package outboxasynq_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func sampleEnvelope(id, topic string) *outbox.Envelope {
	return &outbox.Envelope{
		ID:            id,
		Type:          "order.created",
		AggregateType: "order",
		AggregateID:   "42",
		PartitionKey:  "customer-7",
		TenantID:      "acme",
		Topic:         topic,
		Version:       2,
		Attempt:       1,
		Payload:       []byte(`{"id":42,"total":1999}`),
		Headers: map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tracestate":  "vendor=1",
			"x-request":   "r-1",
		},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC),
	}
}

func TestPublishEnqueuesTheEnvelopeAsOneTask(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	ins := newInspector(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithLogger(testLogger(t)))
	must(t, pub.Validate())

	e := sampleEnvelope("ev-pub-1", q) // the Topic names the queue
	must(t, pub.Publish(t.Context(), e))
	if e.Source != "" {
		t.Errorf("Publish modified the caller's envelope: Source %q", e.Source)
	}

	info, err := ins.GetTaskInfo(q, e.ID)
	if err != nil {
		t.Fatalf("task %s not in queue %s: %v", e.ID, q, err)
	}
	if info.Type != "order.created" || info.ID != e.ID || info.Queue != q || info.State != asynq.TaskStatePending {
		t.Errorf("task %+v", info)
	}
	if !maps.Equal(info.Headers, e.Headers) {
		t.Errorf("headers %v, want %v", info.Headers, e.Headers)
	}
	if info.Retention != outboxasynq.DefaultRetention || info.MaxRetry != 25 {
		t.Errorf("retention %v, max retry %d: want %v and asynq's default 25", info.Retention, info.MaxRetry, outboxasynq.DefaultRetention)
	}
	got, err := outbox.DecodeEnvelope(info.Payload)
	must(t, err)
	want := *e
	want.Source = outbox.DefaultSource
	if !sameEnvelope(got, &want) {
		t.Errorf("payload decodes to\n%+v\nwant\n%+v", got, &want)
	}
}

func sameEnvelope(a, b *outbox.Envelope) bool {
	return a.ID == b.ID && a.Type == b.Type && a.AggregateType == b.AggregateType && a.AggregateID == b.AggregateID &&
		a.PartitionKey == b.PartitionKey && a.TenantID == b.TenantID && a.Topic == b.Topic && a.Source == b.Source &&
		a.Version == b.Version && a.Attempt == b.Attempt && string(a.Payload) == string(b.Payload) &&
		maps.Equal(a.Headers, b.Headers) && a.CreatedAt.Equal(b.CreatedAt)
}

func TestRedeliveryIsCountedAsDeliveredWithoutASecondTask(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	ins := newInspector(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr))

	e := sampleEnvelope("ev-dup-1", q)
	must(t, pub.Publish(t.Context(), e))
	again := *e
	again.Attempt = 2 // the relay's redelivery after a crash
	if err := pub.Publish(t.Context(), &again); err != nil {
		t.Fatalf("a TaskID conflict must count as delivered, got %v", err)
	}
	qi, err := ins.GetQueueInfo(q)
	must(t, err)
	if qi.Size != 1 {
		t.Fatalf("queue holds %d tasks, want 1", qi.Size)
	}
	info, err := ins.GetTaskInfo(q, e.ID)
	must(t, err)
	got, err := outbox.DecodeEnvelope(info.Payload)
	must(t, err)
	if got.Attempt != 1 {
		t.Errorf("the task was replaced by the redelivery (attempt %d)", got.Attempt)
	}

	// The id stays taken after the task succeeded, for the retention.
	srv := startServer(t, addr, q, 1, asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	waitFor(t, 10*time.Second, "the task to complete", func() bool {
		info, err := ins.GetTaskInfo(q, e.ID)
		return err == nil && info.State == asynq.TaskStateCompleted
	})
	srv.Shutdown()
	again.Attempt = 3
	must(t, pub.Publish(t.Context(), &again))
	qi, err = ins.GetQueueInfo(q)
	must(t, err)
	if qi.Pending != 0 || qi.Completed != 1 {
		t.Errorf("after the task completed a redelivery enqueued it again: %d pending, %d completed", qi.Pending, qi.Completed)
	}
}

func TestPublishOptions(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	ins := newInspector(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr),
		outboxasynq.WithSource("urn:shop"),
		outboxasynq.WithTaskType(func(e *outbox.Envelope) string { return "shop:" + e.Type }),
		outboxasynq.WithQueue(func(e *outbox.Envelope) string { return q }),
		outboxasynq.WithMaxRetry(3),
		outboxasynq.WithTimeout(time.Minute),
		outboxasynq.WithRetention(time.Hour),
		outboxasynq.WithTaskOptions(func(e *outbox.Envelope) []asynq.Option {
			// The queue and TaskID cannot be overridden.
			return []asynq.Option{asynq.ProcessIn(time.Hour), asynq.Queue("elsewhere"), asynq.TaskID("other")}
		}),
	)
	must(t, pub.Validate())
	e := sampleEnvelope("ev-opt-1", "ignored-topic")
	must(t, pub.Publish(t.Context(), e))

	info, err := ins.GetTaskInfo(q, e.ID)
	if err != nil {
		t.Fatalf("task not in the mapped queue: %v", err)
	}
	if info.Type != "shop:order.created" || info.MaxRetry != 3 || info.Timeout != time.Minute ||
		info.Retention != time.Hour || info.State != asynq.TaskStateScheduled {
		t.Errorf("task type %q, max retry %d, timeout %v, retention %v, state %v", info.Type, info.MaxRetry, info.Timeout, info.Retention, info.State)
	}
	got, err := outbox.DecodeEnvelope(info.Payload)
	must(t, err)
	if got.Source != "urn:shop" || got.Type != "order.created" {
		t.Errorf("envelope source %q, type %q", got.Source, got.Type)
	}
	for _, other := range []string{"elsewhere", "ignored-topic"} {
		if qi, err := ins.GetQueueInfo(other); err == nil && qi.Size > 0 {
			t.Errorf("queue %q got a task", other)
		}
	}
}

func TestPublishRefusesEventsThatCannotBeTasks(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	blank := outboxasynq.NewPublisher(newClient(t, addr),
		outboxasynq.WithTaskType(func(*outbox.Envelope) string { return " " }))
	plain := outboxasynq.NewPublisher(newClient(t, addr))
	for name, tc := range map[string]struct {
		pub *outboxasynq.Publisher
		e   *outbox.Envelope
	}{
		"no id":      {plain, &outbox.Envelope{Type: "t", Topic: q}},
		"nil":        {plain, nil},
		"blank type": {blank, sampleEnvelope("ev-blank", q)},
	} {
		err := tc.pub.Publish(t.Context(), tc.e)
		if !errors.Is(err, outboxasynq.ErrInvalidTask) || !outbox.IsPermanent(err) {
			t.Errorf("%s: got %v, want a permanent error wrapping ErrInvalidTask", name, err)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []struct {
		opt  outboxasynq.Option
		text string
	}{
		{outboxasynq.WithSource(""), "source"},
		{outboxasynq.WithTaskType(nil), "task type"},
		{outboxasynq.WithQueue(nil), "queue"},
		{outboxasynq.WithMaxRetry(-1), "max retry"},
		{outboxasynq.WithTimeout(-time.Second), "timeout"},
		{outboxasynq.WithRetention(-time.Second), "retention"},
		{outboxasynq.WithTaskOptions(nil), "task options"},
		{outboxasynq.WithLogger(nil), "logger"},
		{nil, "nil option"},
	}
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	for _, b := range bad {
		err := outboxasynq.NewPublisher(client, b.opt).Validate()
		if !errors.Is(err, outboxasynq.ErrInvalidOption) || !strings.Contains(err.Error(), b.text) {
			t.Errorf("option about %s: Validate() = %v", b.text, err)
		}
	}
	err := outboxasynq.NewPublisher(nil, outboxasynq.WithMaxRetry(-2)).Validate()
	if !errors.Is(err, outboxasynq.ErrInvalidOption) || !strings.Contains(err.Error(), "client is nil") || !strings.Contains(err.Error(), "max retry -2") {
		t.Errorf("Validate() = %v, want both errors", err)
	}
	good := outboxasynq.NewPublisher(client, outboxasynq.WithMaxRetry(0), outboxasynq.WithRetention(0), outboxasynq.WithTimeout(0))
	if err := good.Validate(); err != nil {
		t.Errorf("zero values are valid: %v", err)
	}

	// relay.New refuses an invalid publisher, and Publish refuses to run.
	db := testenv.Open(t, testenv.SQLite)
	pub := outboxasynq.NewPublisher(nil)
	if _, err := relay.New(db, pub); !errors.Is(err, relay.ErrInvalidOption) || !errors.Is(err, outboxasynq.ErrInvalidOption) {
		t.Errorf("relay.New accepted an invalid publisher: %v", err)
	}
	if err := pub.Publish(t.Context(), sampleEnvelope("x", "q")); !errors.Is(err, outboxasynq.ErrInvalidOption) {
		t.Errorf("Publish on an invalid publisher: %v", err)
	}
}

func TestRedisOutageIsUnavailable(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	proxy := testenv.NewProxy(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, proxy.Addr()))

	must(t, pub.Publish(t.Context(), sampleEnvelope("ev-out-0", q)))
	proxy.Cut()
	// The first enqueue loses its pooled connection (EOF), the second
	// finds the server closing new ones.
	for _, id := range []string{"ev-out-1", "ev-out-2"} {
		err := pub.Publish(t.Context(), sampleEnvelope(id, q))
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Fatalf("%s while Redis is cut off: %v, want an Unavailable error", id, err)
		}
		if !strings.Contains(err.Error(), id) {
			t.Errorf("the error does not name the event: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	err := pub.Publish(ctx, sampleEnvelope("ev-out-3", q))
	cancel()
	if !outbox.IsUnavailable(err) {
		t.Errorf("enqueue cut short by the caller's deadline: %v, want Unavailable", err)
	}
	proxy.Restore()
	must(t, pub.Publish(t.Context(), sampleEnvelope("ev-out-4", q)))

	// Nothing listening: connection refused, from asynq's SADD this time.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	closed := ln.Addr().String()
	must(t, ln.Close())
	refused := outboxasynq.NewPublisher(newClient(t, closed))
	if err := refused.Publish(t.Context(), sampleEnvelope("ev-out-5", q)); !outbox.IsUnavailable(err) {
		t.Errorf("connection refused: %v, want Unavailable", err)
	}
}

func TestOtherRedisErrorsAreOrdinary(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	// A key of the wrong type where asynq keeps the queue's pending list.
	must(t, rdb.Set(t.Context(), "asynq:{"+q+"}:pending", "not a list", time.Hour).Err())

	err := outboxasynq.NewPublisher(newClient(t, addr)).Publish(t.Context(), sampleEnvelope("ev-wrongtype", q))
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
		t.Fatalf("got %v, want an ordinary (retryable) error", err)
	}
	if !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("error %v does not carry Redis's reply", err)
	}
}

// The publisher says where it enqueues, for relay heartbeats and "outbox
// stats".
func TestPublisherDescribesItself(t *testing.T) {
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	topic := func(e *outbox.Envelope) string { return e.Topic }
	for pub, want := range map[relay.Describer]string{
		outboxasynq.NewPublisher(client):                               "asynq queue default (or the event's Topic)",
		outboxasynq.NewPublisher(client, outboxasynq.WithQueue(topic)): "asynq queue chosen by WithQueue",
	} {
		if got := pub.Describe(); got != want {
			t.Errorf("Describe() = %q, want %q", got, want)
		}
	}
}
