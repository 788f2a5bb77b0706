package outboxkafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// message is a record in hand, for the consume.Consumer. Its counted
// attempts live with it in its partition's queue: a rebalance that takes
// the partition away, or a new Run, reads it again from the committed
// offset and counts from zero.
type message struct {
	t        *transport
	p        *partition
	rec      *kgo.Record
	out      bool // returned by Receive, not settled nor handed back
	settled  bool
	due      time.Time
	attempts int // counted runs that did not succeed
}

// Envelope decodes the record's event, in the Structured or Binary
// layout.
func (m *message) Envelope() (*outbox.Envelope, error) { return decodeRecord(m.rec) }

// Begin runs the record, unless a rebalance waits for the batch: then it
// is handed back, to be read again by whichever member gets its partition.
func (m *message) Begin(context.Context) (consume.Start, error) {
	if m.t.blocked.Load() {
		return consume.Wait, nil
	}
	return consume.Run, nil
}

// OrderKey keeps a partition's records in offset order.
func (m *message) OrderKey() string { return m.rec.Topic + "/" + strconv.Itoa(int(m.rec.Partition)) }

// Delivery counts the record's runs in this member since its partition
// was assigned, and gives its Record.
func (m *message) Delivery() consume.Delivery {
	m.t.mu.Lock()
	n := m.attempts
	m.t.mu.Unlock()
	r := m.rec
	return consume.Delivery{Attempt: n + 1, Details: Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Group: m.t.group, Key: r.Key, Headers: r.Headers, Timestamp: r.Timestamp}}
}

// Attributes are the record's, for the consumer span.
func (m *message) Attributes() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.ConsumerGroup.String(m.t.group),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(m.rec.Partition))),
		attribute.Int64("messaging.kafka.offset", m.rec.Offset), attribute.String("messaging.kafka.message.key", string(m.rec.Key))}
}

// Ack settles the record: its offset is committed with the next batch.
func (m *message) Ack(context.Context) error {
	m.t.settle(m)
	return nil
}

// Retry keeps the record at the head of its partition's queue until delay
// passed: the records after it wait.
func (m *message) Retry(_ context.Context, delay time.Duration, counted bool) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	if counted {
		m.attempts++
	}
	m.due = time.Now().Add(delay)
	m.t.handled(m)
	return nil
}

// Dead produces the record to the dead-letter topic, if there is one, and
// settles it. When that fails, it is retried after the retry delay.
func (m *message) Dead(ctx context.Context, reason error) error {
	t := m.t
	t.mu.Lock()
	cl, deliveries := t.cl, m.attempts+1
	t.mu.Unlock()
	if t.cfg.deadTopic != "" && cl != nil {
		r := m.rec
		hs := append(withoutHeaders(r.Headers, "outbox-dead-"),
			header(HeaderDeadReason, reason.Error()), header(HeaderDeadTopic, r.Topic),
			header(HeaderDeadPartition, strconv.Itoa(int(r.Partition))), header(HeaderDeadOffset, strconv.FormatInt(r.Offset, 10)),
			header(HeaderDeadGroup, t.group), header(HeaderDeadDeliveries, strconv.Itoa(deliveries)))
		dead := &kgo.Record{Topic: t.cfg.deadTopic, Key: r.Key, Value: r.Value, Headers: hs}
		if err := cl.ProduceSync(ctx, dead).FirstErr(); err != nil {
			_ = m.Retry(ctx, t.retryDelay, true)
			return fmt.Errorf("outboxkafka: producing %s/%d@%d to the dead-letter topic %s: %w", r.Topic, r.Partition, r.Offset, t.cfg.deadTopic, err)
		}
	}
	t.settle(m)
	return nil
}

func header(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

// withoutHeaders returns a copy of hs without the headers whose name
// starts with prefix.
func withoutHeaders(hs []kgo.RecordHeader, prefix string) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+7)
	for _, h := range hs {
		if !strings.HasPrefix(h.Key, prefix) {
			out = append(out, h)
		}
	}
	return out
}

// decodeRecord decodes the event a record carries: the CloudEvents JSON of
// the Structured layout, or the Binary layout's ce_ headers and payload.
// Its errors wrap consume.ErrMalformed.
func decodeRecord(r *kgo.Record) (*outbox.Envelope, error) {
	var e *outbox.Envelope
	var err error
	if headerValue(r, "ce_id") != "" {
		e, err = decodeBinary(r)
	} else {
		e, err = outbox.DecodeEnvelope(r.Value)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%d@%d: %w", consume.ErrMalformed, r.Topic, r.Partition, r.Offset, err)
	}
	return e, nil
}

// headerValue returns the value of r's header k ("" when none).
func headerValue(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// decodeBinary reads a record of the Binary layout: the value is the
// payload; ce_ headers are the attributes, content-type the payload's,
// and the other headers the event's own.
func decodeBinary(r *kgo.Record) (*outbox.Envelope, error) {
	e := &outbox.Envelope{Payload: r.Value, Headers: map[string]string{}}
	var err error
	for _, h := range r.Headers {
		v := string(h.Value)
		name, ce := strings.CutPrefix(h.Key, "ce_")
		switch {
		case !ce:
			e.Headers[h.Key] = v
		case name == "time":
			e.CreatedAt, err = time.Parse(time.RFC3339Nano, v)
		case name == "eventversion":
			e.Version, err = number(v)
		case name == "attempt":
			e.Attempt, err = number(v)
		default:
			if p := map[string]*string{"id": &e.ID, "type": &e.Type, "source": &e.Source, "aggregatetype": &e.AggregateType,
				"aggregateid": &e.AggregateID, "partitionkey": &e.PartitionKey, "tenantid": &e.TenantID, "topic": &e.Topic}[name]; p != nil {
				*p = v
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: header %s: %w", outbox.ErrInvalidEnvelope, h.Key, err)
		}
	}
	if ct := e.Headers["content-type"]; ct == (&outbox.Envelope{Payload: e.Payload}).ContentType() {
		delete(e.Headers, "content-type")
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	if e.ID == "" || e.Type == "" {
		return nil, fmt.Errorf("%w: ce_id and ce_type are required", outbox.ErrInvalidEnvelope)
	}
	return e, nil
}

// number reads a number attribute of the Binary layout (written as the
// JSON number was).
func number(v string) (int, error) {
	f, err := strconv.ParseFloat(v, 64)
	return int(f), err
}
