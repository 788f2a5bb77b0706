package outboxkafka

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox"
)

// Topic returns the topic e is published to, or an error wrapping
// ErrNoTopic, marked outbox.Permanent, when it has none or an invalid one.
func (p *Publisher) Topic(e *outbox.Envelope) (string, error) {
	var name string
	switch {
	case p.cfg.topicFunc != nil:
		name = p.cfg.topicFunc(e)
	case p.cfg.layout == Debezium:
		if e.AggregateType != "" {
			name = "outbox.event." + e.AggregateType
		}
	default:
		name = e.Topic
	}
	if name == "" {
		name = p.cfg.topic
	}
	if name == "" {
		return "", outbox.Permanent(fmt.Errorf("%w: event %s (%s) has none, and no WithTopic is given", ErrNoTopic, e.ID, e.Type))
	}
	if err := checkTopic(name); err != nil {
		return "", outbox.Permanent(fmt.Errorf("%w: event %s (%s): %w", ErrNoTopic, e.ID, e.Type, err))
	}
	return name, nil
}

// checkTopic reports why name is not a topic Kafka accepts: empty, "." or
// "..", longer than 249 bytes, or with a character other than ASCII
// letters, digits, '.', '_' and '-'.
func checkTopic(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return fmt.Errorf("%q is not a valid topic name", name)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}); i >= 0 {
		return fmt.Errorf("topic %q holds %q (Kafka allows letters, digits, '.', '_' and '-')", name, name[i])
	}
	return nil
}

// record builds the Kafka record of e, in the Publisher's layout, and
// checks its size. Its errors are permanent.
func (p *Publisher) record(e *outbox.Envelope) (*kgo.Record, error) {
	r, err := p.build(e)
	if err != nil {
		return nil, err
	}
	return r, p.checkSize(e, r)
}

// build builds the Kafka record of e, in the Publisher's layout.
func (p *Publisher) build(e *outbox.Envelope) (*kgo.Record, error) {
	if e == nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: nil envelope", ErrInvalidMessage))
	}
	if e.ID == "" {
		return nil, outbox.Permanent(fmt.Errorf("%w: event of type %q has no id", ErrInvalidMessage, e.Type))
	}
	topic, err := p.Topic(e)
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: topic}
	switch p.cfg.layout {
	case Debezium:
		r.Key, r.Value = key(e.AggregateID), e.Payload
		r.Headers = []kgo.RecordHeader{{Key: "id", Value: []byte(e.ID)}}
	case Binary:
		r.Key, r.Value = key(e.PartitionKey, e.AggregateID), e.Payload
		err = p.binaryHeaders(e, r)
	default:
		r.Key = key(e.PartitionKey, e.AggregateID)
		r.Value, err = p.withSource(e).MarshalJSON()
		r.Headers = append(eventHeaders(e), kgo.RecordHeader{Key: "content-type", Value: []byte(ContentType)})
	}
	if err != nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: encoding event %s: %w", ErrInvalidMessage, e.ID, err))
	}
	return r, nil
}

// key returns the first of keys that is not empty, nil if none is: a
// record without a key has a nil one (the partitioner then spreads it).
func key(keys ...string) []byte {
	for _, k := range keys {
		if k != "" {
			return []byte(k)
		}
	}
	return nil
}

// eventHeaders returns the event's own headers (traceparent, tracestate,
// …) as record headers, but content-type and ce_* names, which the
// CloudEvents binding owns.
func eventHeaders(e *outbox.Envelope) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(e.Headers)+1)
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		if !strings.EqualFold(k, "content-type") && !strings.HasPrefix(strings.ToLower(k), "ce_") {
			hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(e.Headers[k])})
		}
	}
	return hs
}

// withSource returns a copy of e with the Publisher's source when it has
// none: the caller's envelope is not modified.
func (p *Publisher) withSource(e *outbox.Envelope) *outbox.Envelope {
	env := *e
	if env.Source == "" {
		env.Source = p.cfg.Source
	}
	return &env
}

// binaryHeaders sets r's headers in binary mode: each attribute of the
// envelope's CloudEvents JSON (extensions included) as ce_<name>, its
// datacontenttype as content-type, and the event's own headers.
func (p *Publisher) binaryHeaders(e *outbox.Envelope, r *kgo.Record) error {
	b, err := p.withSource(e).MarshalJSON()
	if err != nil {
		return err
	}
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(b, &attrs); err != nil {
		return err
	}
	r.Headers = eventHeaders(e)
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		var v any
		if err := json.Unmarshal(attrs[name], &v); err != nil {
			return err
		}
		switch name {
		case "data", "data_base64", "headers": // the value; the event's headers are there already
		case "datacontenttype":
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "content-type", Value: fmt.Append(nil, v)})
		default:
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "ce_" + name, Value: fmt.Append(nil, v)})
		}
	}
	return nil
}

// recordBatchOverhead is the size of a record batch without its records.
const recordBatchOverhead = 61

// checkSize fails a record that the producer could not send: one that does
// not fit a record batch on its own (kgo.ProducerBatchMaxBytes, for its
// topic), or is larger than the client buffers (kgo.MaxBufferedBytes).
func (p *Publisher) checkSize(e *outbox.Envelope, r *kgo.Record) error {
	n := 1 + 1 + 1 + // attributes, timestamp delta and offset delta, alone in a batch
		kbin.VarintLen(int32(len(r.Key))) + len(r.Key) +
		kbin.VarintLen(int32(len(r.Value))) + len(r.Value) +
		kbin.VarintLen(int32(len(r.Headers)))
	user := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + kbin.VarintLen(int32(len(h.Value))) + len(h.Value)
		user += len(h.Key) + len(h.Value)
	}
	size, limit := recordBatchOverhead+kbin.VarintLen(int32(n))+n, int(p.batchMax(r.Topic))
	what := "kgo.ProducerBatchMaxBytes"
	if p.maxBuffered > 0 && int64(user) > p.maxBuffered {
		size, limit, what = user, int(p.maxBuffered), "kgo.MaxBufferedBytes"
	}
	if size > limit {
		return outbox.Permanent(fmt.Errorf("%w: event %s (%s) to %s is a record of %d bytes, more than the producer's %s of %d: %w",
			ErrTooLarge, e.ID, e.Type, r.Topic, size, what, limit, kerr.MessageTooLarge))
	}
	return nil
}
