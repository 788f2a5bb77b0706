package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Column sizes, in characters. Event validation enforces them on every
// dialect, so an event that SQLite would accept is not refused later by
// PostgreSQL or MariaDB.
const (
	MaxIDLen            = 128
	MaxTypeLen          = 255
	MaxTenantIDLen      = 128
	MaxAggregateTypeLen = 128
	MaxAggregateIDLen   = 255
	MaxPartitionKeyLen  = 255
	MaxTopicLen         = 255
	// MaxHeadersBytes bounds the JSON encoding of Headers.
	MaxHeadersBytes = 64 << 10
)

// Payload size limits (Plugin.MaxPayloadSize).
const (
	// DefaultMaxPayloadSize is the largest payload, in bytes as stored (the
	// JSON encoding, or the bytes given), that a Plugin accepts unless its
	// MaxPayloadSize says otherwise: 1 MiB. A relay holds a batch of
	// payloads in memory, and every broker has a message size limit.
	DefaultMaxPayloadSize = 1 << 20
	// NoPayloadLimit, as Plugin.MaxPayloadSize, accepts payloads of any
	// size (up to what the database and the brokers take).
	NoPayloadLimit = -1
)

// Event is what an application emits. Only Type is required.
//
// The zero values mean: ID, a new UUIDv7; Version, 1; AvailableAt, now (by
// the database clock); MaxAttempts, the relay's default.
type Event struct {
	// ID identifies the event and is its dedupe key: emitting the same ID
	// again with the same content is a no-op, with other content it fails
	// with ErrDuplicateEvent. Consumers use it as their idempotency key.
	ID string
	// Type names what happened, such as "order.created".
	Type string
	// AggregateType and AggregateID name the entity the event is about.
	AggregateType string
	AggregateID   string
	// PartitionKey orders delivery: events sharing a key are delivered one
	// at a time, in the commit order of their transactions. Empty: no order.
	PartitionKey string
	// TenantID is carried to consumers; the outbox does not interpret it.
	TenantID string
	// Topic routes the event (an asynq queue, a Redis stream); publishers
	// fall back to their own default when it is empty.
	Topic string
	// Version is the schema version of Payload (default 1).
	Version int
	// Payload is marshalled with encoding/json, except that []byte and
	// json.RawMessage are stored exactly as given. Nil stores no payload.
	Payload any
	// Headers are delivered with the event. The W3C trace context of the
	// current OpenTelemetry span is added as "traceparent" (and
	// "tracestate") unless already present.
	Headers map[string]string
	// AvailableAt delays delivery until that instant.
	AvailableAt time.Time
	// MaxAttempts bounds delivery attempts before the event is dead
	// (0: the relay's default).
	MaxAttempts int
}

// encodedEvent is an Event validated and converted to column values.
type encodedEvent struct {
	EventID       string
	ownID         bool // EventID was set by the application: a dedupe key
	Type          string
	Version       int
	TenantID      string
	AggregateType string
	AggregateID   string
	PartitionKey  string
	Topic         string
	Payload       []byte // nil: SQL NULL
	Headers       []byte // nil: SQL NULL
	AvailableAt   *time.Time
	MaxAttempts   int
}

// encode validates e and converts it to column values. The context's
// headers (trace context, metadata) are added unless the event already
// sets them, its tenant is the TenantID of an event without one;
// c.maxPayload > 0 bounds the payload's size in bytes; c.reg, when set,
// checks the event.
func (e *Event) encode(c *writeContext) (encodedEvent, error) {
	if e.TenantID == "" && c.tenant != "" {
		withTenant := *e
		withTenant.TenantID = c.tenant
		e = &withTenant
	}
	if err := e.validate(); err != nil {
		return encodedEvent{}, err
	}
	out := encodedEvent{
		EventID:       e.ID,
		Type:          e.Type,
		Version:       e.Version,
		TenantID:      e.TenantID,
		AggregateType: e.AggregateType,
		AggregateID:   e.AggregateID,
		PartitionKey:  e.PartitionKey,
		Topic:         e.Topic,
		MaxAttempts:   e.MaxAttempts,
	}
	if out.Version == 0 {
		out.Version = 1
	}
	out.ownID = out.EventID != ""
	if !out.ownID {
		id, err := uuid.NewV7()
		if err != nil {
			return encodedEvent{}, fmt.Errorf("outbox: generating event id: %w", err)
		}
		out.EventID = id.String()
	}
	if !e.AvailableAt.IsZero() {
		t := e.AvailableAt.UTC()
		out.AvailableAt = &t
	}

	var err error
	if out.Payload, err = encodePayload(e.Payload); err != nil {
		return encodedEvent{}, err
	}
	if c.maxPayload > 0 && len(out.Payload) > c.maxPayload {
		return encodedEvent{}, invalid("Payload", "is %d bytes, the limit is %d (Plugin.MaxPayloadSize)", len(out.Payload), c.maxPayload)
	}
	if c.reg != nil {
		if err := c.reg.checkWrite(e, out.Payload, c.headersOf(e)); err != nil {
			return encodedEvent{}, err
		}
	}
	if out.Headers, err = encodeHeaders(e.Headers, c.headers); err != nil {
		return encodedEvent{}, err
	}
	return out, nil
}

// validate checks the fields of e against their columns.
func (e *Event) validate() error {
	if strings.TrimSpace(e.Type) == "" {
		return invalid("Type", "is required")
	}
	for _, f := range [...]struct {
		name, value string
		max         int
	}{
		{"ID", e.ID, MaxIDLen},
		{"Type", e.Type, MaxTypeLen},
		{"AggregateType", e.AggregateType, MaxAggregateTypeLen},
		{"AggregateID", e.AggregateID, MaxAggregateIDLen},
		{"PartitionKey", e.PartitionKey, MaxPartitionKeyLen},
		{"TenantID", e.TenantID, MaxTenantIDLen},
		{"Topic", e.Topic, MaxTopicLen},
	} {
		if err := checkString(f.name, f.value, f.max); err != nil {
			return err
		}
	}
	if e.Version < 0 {
		return invalid("Version", "must not be negative, got %d", e.Version)
	}
	if e.MaxAttempts < 0 {
		return invalid("MaxAttempts", "must not be negative, got %d", e.MaxAttempts)
	}
	return nil
}

func checkString(field, v string, max int) error {
	if v == "" {
		return nil
	}
	if !utf8.ValidString(v) {
		return invalid(field, "is not valid UTF-8")
	}
	if strings.IndexByte(v, 0) >= 0 {
		return invalid(field, "contains a NUL byte")
	}
	if n := utf8.RuneCountInString(v); n > max {
		return invalid(field, "is %d characters long, the column holds %d", n, max)
	}
	return nil
}

func encodePayload(p any) ([]byte, error) {
	switch v := p.(type) {
	case nil:
		return nil, nil
	case []byte:
		return bytes.Clone(v), nil
	case json.RawMessage:
		return bytes.Clone(v), nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, invalid("Payload", "cannot be marshalled to JSON: %v", err)
	}
	return b, nil
}

func encodeHeaders(h, trace map[string]string) ([]byte, error) {
	if len(h) == 0 && len(trace) == 0 {
		return nil, nil
	}
	all := h
	if len(trace) > 0 {
		all = make(map[string]string, len(h)+len(trace))
		maps.Copy(all, trace)
		maps.Copy(all, h) // the application's own headers win
	}
	for k, v := range all {
		if k == "" {
			return nil, invalid("Headers", "has an empty key")
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, invalid("Headers", "key %q: not valid UTF-8", k)
		}
	}
	b, err := json.Marshal(all)
	if err != nil {
		return nil, invalid("Headers", "cannot be marshalled: %v", err)
	}
	if len(b) > MaxHeadersBytes {
		return nil, invalid("Headers", "encode to %d bytes, the limit is %d", len(b), MaxHeadersBytes)
	}
	return b, nil
}
