package outboxkafka_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// headers returns a record's headers as a map, failing on a repeated one.
func headers(t testing.TB, r *kgo.Record) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range r.Headers {
		if _, ok := m[h.Key]; ok {
			t.Errorf("header %s twice", h.Key)
		}
		m[h.Key] = string(h.Value)
	}
	return m
}

// publishAll publishes es in one batch and fails on any error.
func publishAll(t testing.TB, p *outboxkafka.Publisher, es ...*outbox.Envelope) {
	t.Helper()
	for i, err := range p.PublishBatch(t.Context(), es) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
}

// The default layout is the CloudEvents Kafka binding in structured mode:
// the value is the envelope's JSON (the publisher's source filled in), the
// content-type header says so, the event's own headers are copied but
// content-type and ce_*; the key is the PartitionKey, else the
// AggregateID, else none.
func TestStructuredLayout(t *testing.T) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		topic := c.topic(t, 3, nil)
		keyed, byAggregate, none := envelope("a", topic, "customer-7"), envelope("b", topic, ""), envelope("c", topic, "")
		none.AggregateID = ""
		keyed.Headers["content-type"] = "application/json"
		keyed.Headers["ce_id"] = "forged"
		keyed.Headers["tenant-region"] = "eu"
		publishAll(t, newPublisher(t, c.client(t), outboxkafka.WithSource("shop")), keyed, byAggregate, none)

		recs := c.records(t, topic)
		if len(recs) != 3 {
			t.Fatalf("%d records, want 3", len(recs))
		}
		wantKey := map[string]string{"a": "customer-7", "b": "agg-b", "c": ""}
		for _, r := range recs {
			e, err := outbox.DecodeEnvelope(r.Value)
			must(t, err)
			if string(r.Key) != wantKey[e.ID] || (e.ID == "c" && r.Key != nil) {
				t.Errorf("event %s: key %q, want %q", e.ID, r.Key, wantKey[e.ID])
			}
			if e.Source != "shop" || e.Type != "order.created" || string(e.Payload) != `{"id":"`+e.ID+`"}` || e.Topic != topic {
				t.Errorf("event %s decoded as %+v", e.ID, e)
			}
			h := headers(t, r)
			if h["content-type"] != outboxkafka.ContentType || h["traceparent"] == "" || h["ce_id"] != "" {
				t.Errorf("event %s: headers %v", e.ID, h)
			}
			if e.ID == "a" && (h["tenant-region"] != "eu" || len(h) != 3) {
				t.Errorf("event a: headers %v, want content-type, traceparent and tenant-region", h)
			}
		}
	})
}

// Binary mode: the value is the payload, each CloudEvents attribute and
// extension a ce_ header, content-type the payload's media type, the
// event's own headers (traceparent included) as they are.
func TestBinaryLayout(t *testing.T) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		topic := c.topic(t, 1, nil)
		e := envelope("a", topic, "customer-7")
		e.TenantID, e.Version, e.Headers["tenant-region"] = "t1", 3, "eu"
		publishAll(t, newPublisher(t, c.client(t), outboxkafka.WithLayout(outboxkafka.Binary)), e)
		recs := c.records(t, topic)
		if len(recs) != 1 {
			t.Fatalf("%d records, want 1", len(recs))
		}
		r := recs[0]
		want := map[string]string{
			"ce_specversion": "1.0", "ce_id": "a", "ce_source": outbox.DefaultSource, "ce_type": "order.created",
			"ce_subject": "order/agg-a", "ce_time": "2026-01-02T03:04:05.6Z", "ce_aggregatetype": "order",
			"ce_aggregateid": "agg-a", "ce_partitionkey": "customer-7", "ce_tenantid": "t1", "ce_topic": topic,
			"ce_eventversion": "3", "ce_attempt": "1", "ce_traceparent": e.Headers["traceparent"],
			"content-type": "application/json", "traceparent": e.Headers["traceparent"], "tenant-region": "eu",
		}
		got := headers(t, r)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("header %s = %q, want %q", k, got[k], v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("headers %v, want exactly %v", got, want)
		}
		if string(r.Value) != `{"id":"a"}` || string(r.Key) != "customer-7" {
			t.Errorf("key %q value %q, want the partition key and the payload", r.Key, r.Value)
		}
	})
}

// The Debezium layout is what Debezium's outbox event router writes with
// its defaults (route.by.field aggregatetype, route.topic.replacement
// outbox.event.${routedByValue}, table.field.event.key aggregateid,
// table.field.event.payload payload, table.field.event.id as the header
// id): topic outbox.event.<AggregateType>, key the AggregateID (not the
// PartitionKey), value the payload, one header id, nothing else.
func TestDebeziumLayout(t *testing.T) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		aggregate := testenv.Name("Order")
		c.topicNamed(t, "outbox.event."+aggregate, 1, nil)
		e := envelope("4d47e190-0402-4048-bc2c-89dd54343cdc", "ignored-topic", "customer-7")
		e.AggregateType, e.AggregateID = aggregate, "1"
		publishAll(t, newPublisher(t, c.client(t), outboxkafka.WithLayout(outboxkafka.Debezium)), e)
		recs := c.records(t, "outbox.event."+aggregate)
		if len(recs) != 1 {
			t.Fatalf("%d records in outbox.event.%s, want 1", len(recs), aggregate)
		}
		r := recs[0]
		if string(r.Key) != "1" || string(r.Value) != string(e.Payload) || len(r.Headers) != 1 ||
			r.Headers[0].Key != "id" || string(r.Headers[0].Value) != e.ID {
			t.Errorf("record key %q value %q headers %v; want key 1, the payload, id=%s", r.Key, r.Value, r.Headers, e.ID)
		}
	})
}

// A topic comes from the event's Topic, else WithTopic; WithTopicFunc
// chooses instead, an empty answer meaning WithTopic's. Without any, or
// with a name Kafka refuses, the event fails with ErrNoTopic, permanent,
// and nothing is sent; the other events of the batch are published.
func TestTopicChoice(t *testing.T) {
	c := newFake(t)
	own, fallback, chosen := c.topic(t, 1, nil), c.topic(t, 1, nil), c.topic(t, 1, nil)
	cl := c.client(t)
	p := newPublisher(t, cl, outboxkafka.WithTopic(fallback))
	errs := p.PublishBatch(t.Context(), []*outbox.Envelope{envelope("a", own, ""), envelope("b", "", ""), envelope("c", "bad topic", "")})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], outboxkafka.ErrNoTopic) || !outbox.IsPermanent(errs[2]) {
		t.Fatalf("errors %v, want nil, nil, ErrNoTopic (permanent)", errs)
	}
	if n := len(c.records(t, own)); n != 1 {
		t.Errorf("%d records in the event's topic, want 1", n)
	}
	if n := len(c.records(t, fallback)); n != 1 {
		t.Errorf("%d records in WithTopic's topic, want 1", n)
	}

	fn := newPublisher(t, cl, outboxkafka.WithTopic(fallback), outboxkafka.WithTopicFunc(func(e *outbox.Envelope) string {
		if e.ID == "d" {
			return chosen
		}
		return ""
	}))
	publishAll(t, fn, envelope("d", own, ""), envelope("e", own, ""))
	if n, m := len(c.records(t, chosen)), len(c.records(t, fallback)); n != 1 || m != 2 {
		t.Errorf("%d records in the chosen topic and %d in the default one, want 1 and 2", n, m)
	}

	none := newPublisher(t, cl)
	for _, e := range []*outbox.Envelope{envelope("f", "", ""), {ID: "g", Type: "t"}} {
		if err := none.Publish(t.Context(), e); !errors.Is(err, outboxkafka.ErrNoTopic) || !outbox.IsPermanent(err) {
			t.Errorf("%s without a topic: %v, want ErrNoTopic (permanent)", e.ID, err)
		}
	}
	dbz := newPublisher(t, cl, outboxkafka.WithLayout(outboxkafka.Debezium))
	if err := dbz.Publish(t.Context(), &outbox.Envelope{ID: "h", Type: "t", Topic: own}); !errors.Is(err, outboxkafka.ErrNoTopic) {
		t.Errorf("Debezium layout without an aggregate type: %v, want ErrNoTopic", err)
	}
	for _, e := range []*outbox.Envelope{nil, {Type: "t", Topic: own}} {
		if err := none.Publish(t.Context(), e); !errors.Is(err, outboxkafka.ErrInvalidMessage) || !outbox.IsPermanent(err) {
			t.Errorf("%+v: %v, want ErrInvalidMessage (permanent)", e, err)
		}
	}
}

// The Publisher checks a record against the producer's limits before
// sending, by kgo's own measure: across the boundary it refuses exactly
// the records kgo fails itself (MESSAGE_TOO_LARGE before buffering), with
// ErrTooLarge, permanent, wrapping kerr.MessageTooLarge.
func TestTooLargeCheckedBeforeSending(t *testing.T) {
	const limit = 2048
	c := newFake(t)
	topic := c.topic(t, 1, nil)
	for _, opt := range []kgo.Opt{kgo.ProducerBatchMaxBytes(limit), kgo.MaxBufferedBytes(limit)} {
		cl := c.client(t, opt)
		p := newPublisher(t, cl)
		publishAll(t, p, envelope("warm", topic, "k")) // the produce version is known from here
		refused, sent := 0, 0
		sized := func(n int) *outbox.Envelope {
			e := envelope("x", topic, "k")
			e.Headers, e.Payload = nil, []byte(`"`+strings.Repeat("a", n)+`"`) // JSON: inline in the envelope
			return e
		}
		empty, err := outboxkafka.NewPublisherRecord(p, sized(0))
		must(t, err)
		base := len(empty.Value) + len(empty.Key) // the payload's room is about limit - base
		for size := limit - base - 180; size <= limit-base+10; size++ {
			e := sized(size)
			rec, err := outboxkafka.NewPublisherRecord(p, e)
			must(t, err)
			kerrOf := cl.ProduceSync(t.Context(), rec).FirstErr()
			ours := p.Publish(t.Context(), e)
			switch {
			case errors.Is(kerrOf, kerr.MessageTooLarge) != errors.Is(ours, outboxkafka.ErrTooLarge):
				t.Fatalf("payload of %d bytes: kgo says %v, the Publisher %v", size, kerrOf, ours)
			case ours == nil:
				sent++
			case !outbox.IsPermanent(ours) || !errors.Is(ours, kerr.MessageTooLarge):
				t.Fatalf("payload of %d bytes: %v, want permanent and MESSAGE_TOO_LARGE", size, ours)
			default:
				refused++
			}
		}
		if refused == 0 || sent == 0 {
			t.Errorf("%d refused, %d sent: the sizes do not cross the limit", refused, sent)
		}
	}
}

// A record the broker refuses as too large (the topic's max.message.bytes
// is below the producer's limit) fails the whole batch of its partition:
// its neighbours are produced again alone and published; it alone fails,
// ErrTooLarge, permanent, with the broker's reason.
func TestBrokerTooLargeFailsOnlyTheRecord(t *testing.T) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		maxBytes := "1500"
		topic := c.topic(t, 1, map[string]*string{"max.message.bytes": &maxBytes})
		es := make([]*outbox.Envelope, 8)
		for i := range es {
			es[i] = envelope(eventID(i), topic, eventID(i))
		}
		es[3].Payload = []byte(`{"big":"` + incompressible(3000) + `"}`) // compression would make it fit
		errs := newPublisher(t, c.client(t, kgo.ProducerLinger(50*time.Millisecond))).PublishBatch(t.Context(), es)
		for i, err := range errs {
			if i == 3 {
				if !errors.Is(err, outboxkafka.ErrTooLarge) || !outbox.IsPermanent(err) || !strings.Contains(err.Error(), "MESSAGE_TOO_LARGE") {
					t.Errorf("the large event: %v, want ErrTooLarge (permanent) with the broker's reason", err)
				}
			} else if err != nil {
				t.Errorf("event %d: %v", i, err)
			}
		}
		if n := len(c.records(t, topic)); n != 7 {
			t.Errorf("%d records, want the 7 small ones", n)
		}
	})
}

// A topic that does not exist is never created: the event fails with
// ErrRejected, permanent, once the client's unknown-topic retries are
// spent.
func TestUnknownTopicIsPermanent(t *testing.T) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		err := newPublisher(t, c.client(t)).Publish(t.Context(), envelope("a", "okafka-missing-"+eventID(7), ""))
		if !errors.Is(err, outboxkafka.ErrRejected) || !errors.Is(err, kerr.UnknownTopicOrPartition) || !outbox.IsPermanent(err) {
			t.Errorf("publish to a missing topic: %v, want ErrRejected (permanent) for UNKNOWN_TOPIC_OR_PARTITION", err)
		}
	})
}

// Errors the broker answers a produce with, injected per request: the
// retriable ones (NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT) are retried
// by the client and the events published; while they last past the ack
// timeout the events are Unavailable; MESSAGE_TOO_LARGE and INVALID_RECORD
// for a record batch make its records go again, one per partition
// (published when the broker takes them then, permanent when it refuses
// them alone);
// TOPIC_AUTHORIZATION_FAILED is permanent.
func TestInjectedProduceErrors(t *testing.T) {
	cases := []struct {
		err   *kerr.Error
		times int // -1: until the test ends
		want  func(error) bool
	}{
		{kerr.NotLeaderForPartition, 3, isNil},
		{kerr.RequestTimedOut, 3, isNil},
		{kerr.MessageTooLarge, 1, isNil},
		{kerr.InvalidRecord, 1, isNil},
		{kerr.NotLeaderForPartition, -1, outbox.IsUnavailable},
		{kerr.RequestTimedOut, -1, outbox.IsUnavailable},
		{kerr.NotEnoughReplicas, -1, outbox.IsUnavailable},
		{kerr.MessageTooLarge, -1, func(err error) bool { return outbox.IsPermanent(err) && errors.Is(err, outboxkafka.ErrTooLarge) }},
		{kerr.InvalidRecord, -1, func(err error) bool { return outbox.IsPermanent(err) && errors.Is(err, outboxkafka.ErrRejected) }},
		{kerr.TopicAuthorizationFailed, -1, func(err error) bool { return outbox.IsPermanent(err) && errors.Is(err, outboxkafka.ErrRejected) }},
	}
	for _, tc := range cases {
		name := tc.err.Message
		if tc.times < 0 {
			name += "/persistent"
		}
		t.Run(name, func(t *testing.T) {
			c := newFake(t)
			topic := c.topic(t, 1, nil) // the records share a record batch
			p := newPublisher(t, c.client(t, kgo.ProducerLinger(50*time.Millisecond)), outboxkafka.WithAckTimeout(time.Second))
			defer c.failProduce(t, tc.err, tc.times).Stop()
			es := []*outbox.Envelope{envelope("a", topic, "k1"), envelope("b", topic, "k2"), envelope("c", topic, "k3")}
			for i, err := range p.PublishBatch(t.Context(), es) {
				if !tc.want(err) {
					t.Errorf("event %d: %v", i, err)
				}
				if err != nil && !strings.Contains(err.Error(), tc.err.Message) && !strings.Contains(err.Error(), "acknowledgement") {
					t.Errorf("event %d: %v does not give the broker's reason", i, err)
				}
			}
		})
	}
}

func isNil(err error) bool { return err == nil }

// incompressible returns n characters that compression cannot shrink
// much.
func incompressible(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)[:n]
}

// One debug line per batch gives the partitions and offsets written.
func TestBatchLogLine(t *testing.T) {
	c := newFake(t)
	topic := c.topic(t, 1, nil)
	var buf bytes.Buffer
	p, err := outboxkafka.NewPublisher(c.client(t), outboxkafka.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	must(t, err)
	publishAll(t, p, envelope("a", topic, ""), envelope("b", topic, ""))
	publishAll(t, p, envelope("c", topic, ""))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "offsets="+topic+"/0@0-1") || !strings.Contains(lines[1], "offsets="+topic+"/0@2-2") ||
		!strings.Contains(lines[0], "published=2") {
		t.Errorf("log:\n%s\nwant one line per batch with %s/0@0-1, then %s/0@2-2", buf.String(), topic, topic)
	}
}

// NewPublisher refuses a nil client, bad options, and a client that could
// reorder a key's events or never send them, naming the reason.
func TestNewPublisherRefuses(t *testing.T) {
	c := newFake(t)
	bad := map[string]struct {
		cl   []kgo.Opt
		opts []outboxkafka.Option
		want string
	}{
		"transactional":   {cl: []kgo.Opt{kgo.TransactionalID("x")}, want: "transactional"},
		"manual flushing": {cl: []kgo.Opt{kgo.ManualFlushing()}, want: "ManualFlushing"},
		"default topic":   {cl: []kgo.Opt{kgo.DefaultProduceTopicAlways(), kgo.DefaultProduceTopic("t")}, want: "DefaultProduceTopicAlways"},
		"round robin":     {cl: []kgo.Opt{kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}, want: "partitioner"},
		"not idempotent":  {cl: []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5)}, want: "reorder"},
		"bad topic":       {opts: []outboxkafka.Option{outboxkafka.WithTopic("a b")}, want: "topic"},
		"nil func":        {opts: []outboxkafka.Option{outboxkafka.WithTopicFunc(nil)}, want: "nil topic function"},
		"nil logger":      {opts: []outboxkafka.Option{outboxkafka.WithLogger(nil)}, want: "nil logger"},
		"empty source":    {opts: []outboxkafka.Option{outboxkafka.WithSource("")}, want: "empty source"},
		"bad layout":      {opts: []outboxkafka.Option{outboxkafka.WithLayout(7)}, want: "layout"},
		"bad timeout":     {opts: []outboxkafka.Option{outboxkafka.WithAckTimeout(-time.Second)}, want: "negative"},
		"nil option":      {opts: []outboxkafka.Option{nil}, want: "nil option"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			p, err := outboxkafka.NewPublisher(c.client(t, tc.cl...), tc.opts...)
			if p != nil || !errors.Is(err, outboxkafka.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewPublisher: %v, %v; want ErrInvalidOption saying %q", p, err, tc.want)
			}
		})
	}
	if _, err := outboxkafka.NewPublisher(nil); !errors.Is(err, outboxkafka.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	// Idempotence off with one request in flight keeps order: accepted.
	if _, err := outboxkafka.NewPublisher(c.client(t, kgo.DisableIdempotentWrite())); err != nil {
		t.Errorf("idempotence off, one request in flight: %v", err)
	}
	var zero *outboxkafka.Publisher
	if err := zero.Validate(); !errors.Is(err, outboxkafka.ErrInvalidOption) {
		t.Errorf("Validate of a nil Publisher: %v", err)
	}
	if err := zero.Publish(context.Background(), envelope("a", "t", "")); !errors.Is(err, outboxkafka.ErrInvalidOption) {
		t.Errorf("Publish of a nil Publisher: %v", err)
	}
}

// Describe names the topics, the layout and the seed brokers.
func TestDescribe(t *testing.T) {
	c := newFake(t)
	d := newPublisher(t, c.client(t), outboxkafka.WithTopic("orders"), outboxkafka.WithLayout(outboxkafka.Binary)).Describe()
	if !strings.Contains(d, "<Topic> (default orders)") || !strings.Contains(d, "binary") || !strings.Contains(d, c.brokers[0]) {
		t.Errorf("Describe() = %q", d)
	}
	d = newPublisher(t, c.client(t), outboxkafka.WithLayout(outboxkafka.Debezium)).Describe()
	if !strings.Contains(d, "outbox.event.<AggregateType>") || !strings.Contains(d, "debezium") {
		t.Errorf("Describe() = %q", d)
	}
}
