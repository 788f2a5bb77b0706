package outboxamqp

import (
	"cmp"
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// ContentType is the content type of every message the Publisher sends:
// the body is the envelope as a CloudEvents 1.0 structured-mode JSON
// event (outbox.DecodeEnvelope reads it back).
const ContentType = "application/cloudevents+json"

// Headers the Publisher adds to every message, when the event has the
// field, so that headers exchanges and consumers can route or filter
// without decoding the body. They take precedence over event headers of
// the same name. The event's own headers (traceparent, tracestate, …)
// are copied too.
const (
	HeaderEventType     = "event-type"
	HeaderEventVersion  = "event-version" // an integer
	HeaderTenantID      = "tenant-id"
	HeaderAggregateType = "aggregate-type"
	HeaderAggregateID   = "aggregate-id"
	HeaderPartitionKey  = "partition-key"
)

// maxShortStr is AMQP's limit on names (exchange, routing key, header
// keys, message id, type, app id), in bytes.
const maxShortStr = 255

// Route returns the exchange and routing key of e: WithRouting's, or
// WithExchange's exchange ("" by default, the default exchange) with the
// event's Topic as the routing key, or its Type when it has no Topic.
func (p *Publisher) Route(e *outbox.Envelope) (exchange, key string) {
	if p.cfg.routing != nil {
		return p.cfg.routing(e)
	}
	key = e.Topic
	if key == "" {
		key = e.Type
	}
	return p.cfg.exchange, key
}

// item is one event to publish.
type item struct {
	idx      int // in the batch
	env      *outbox.Envelope
	exchange string
	key      string
	msg      amqp.Publishing
}

// message builds the AMQP message of e. Its errors are permanent.
func (p *Publisher) message(idx int, e *outbox.Envelope) (*item, error) {
	if e == nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: nil envelope", ErrInvalidMessage))
	}
	if e.ID == "" {
		return nil, outbox.Permanent(fmt.Errorf("%w: event of type %q has no id", ErrInvalidMessage, e.Type))
	}
	exchange, key := p.Route(e)
	body, err := adapterkit.EncodeEnvelope(e, p.cfg.Source, ErrInvalidMessage)
	if err != nil {
		return nil, err
	}
	m := amqp.Publishing{
		ContentType:  ContentType,
		DeliveryMode: amqp.Persistent,
		Type:         e.Type,
		AppId:        cmp.Or(e.Source, p.cfg.Source),
		Timestamp:    e.CreatedAt,
		Headers:      headers(e),
	}
	if p.cfg.message != nil {
		p.cfg.message(e, &m)
	}
	m.MessageId, m.Body = e.ID, body
	if err := checkNames(exchange, key, &m); err != nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: event %s (%s): %w", ErrInvalidMessage, e.ID, e.Type, err))
	}
	return &item{idx: idx, env: e, exchange: exchange, key: key, msg: m}, nil
}

// headers returns the AMQP headers of e.
func headers(e *outbox.Envelope) amqp.Table {
	h := make(amqp.Table, len(e.Headers)+6)
	for k, v := range e.Headers {
		h[k] = v
	}
	h[HeaderEventType] = e.Type
	if e.Version != 0 {
		h[HeaderEventVersion] = int32(e.Version)
	}
	for k, v := range map[string]string{
		HeaderTenantID: e.TenantID, HeaderAggregateType: e.AggregateType,
		HeaderAggregateID: e.AggregateID, HeaderPartitionKey: e.PartitionKey,
	} {
		if v != "" {
			h[k] = v
		}
	}
	return h
}

// checkNames checks what AMQP sends as short strings, and the headers.
func checkNames(exchange, key string, m *amqp.Publishing) error {
	for what, s := range map[string]string{
		"exchange": exchange, "routing key": key, "message id": m.MessageId, "type": m.Type,
		"app id": m.AppId, "correlation id": m.CorrelationId, "reply-to": m.ReplyTo,
		"expiration": m.Expiration, "user id": m.UserId, "content type": m.ContentType,
		"content encoding": m.ContentEncoding,
	} {
		if len(s) > maxShortStr {
			return fmt.Errorf("%s is %d bytes long, more than AMQP's %d", what, len(s), maxShortStr)
		}
	}
	for k := range m.Headers {
		if len(k) > maxShortStr {
			return fmt.Errorf("header key %q… is %d bytes long, more than AMQP's %d", k[:32], len(k), maxShortStr)
		}
	}
	if err := m.Headers.Validate(); err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	return nil
}

// describeRoute says where events go, for Describe.
func (p *Publisher) describeRoute() string {
	switch {
	case p.cfg.routing != nil:
		return "amqp exchange and routing key chosen by WithRouting"
	case p.cfg.exchange == "":
		return "amqp default exchange, queue = the event's Topic (or Type)"
	default:
		return "amqp exchange " + strconv.Quote(p.cfg.exchange) + ", routing key = the event's Topic (or Type)"
	}
}
