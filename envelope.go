package outbox

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalidEnvelope is wrapped by every error of DecodeEnvelope.
var ErrInvalidEnvelope = errors.New("outbox: invalid envelope")

// DefaultSource is the CloudEvents source of an Envelope whose Source is empty.
const DefaultSource = "gorm-outbox"

// Envelope is what publishers and handlers receive: an event as stored,
// with its delivery attempt.
//
// Its JSON form (MarshalJSON, DecodeEnvelope) is a CloudEvents 1.0 event in
// structured mode: id, source, type, subject, time, datacontenttype and
// data (or data_base64 when the payload is not JSON or not UTF-8), with
// the extensions aggregatetype, aggregateid, partitionkey, tenantid,
// topic, eventversion, attempt, traceparent and tracestate, and the other
// headers as the JSON-object string extension headers.
type Envelope struct {
	ID            string
	Type          string
	AggregateType string
	AggregateID   string
	PartitionKey  string
	TenantID      string
	Topic         string
	// Source is the CloudEvents source (DefaultSource when empty);
	// publishers set it from their options.
	Source  string
	Version int
	// Attempt counts delivery attempts, from 1.
	Attempt int
	Payload []byte
	Headers map[string]string
	// CreatedAt is when the event was written.
	CreatedAt time.Time
}

// ContentType returns the media type of Payload: the "content-type"
// header when set, otherwise application/json when Payload is valid JSON
// and application/octet-stream when it is not.
func (e *Envelope) ContentType() string {
	if ct := e.Headers["content-type"]; ct != "" {
		return ct
	}
	if len(e.Payload) == 0 || json.Valid(e.Payload) {
		return "application/json"
	}
	return "application/octet-stream"
}

// Unmarshal decodes a JSON Payload into v.
func (e *Envelope) Unmarshal(v any) error {
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("outbox: decoding payload of event %s (%s): %w", e.ID, e.Type, err)
	}
	return nil
}

// cloudEvent is the structured-mode JSON of an Envelope.
type cloudEvent struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	Time            *time.Time      `json:"time,omitempty"`
	DataContentType string          `json:"datacontenttype,omitempty"`
	Data            json.RawMessage `json:"data,omitempty"`
	DataBase64      string          `json:"data_base64,omitempty"`
	AggregateType   string          `json:"aggregatetype,omitempty"`
	AggregateID     string          `json:"aggregateid,omitempty"`
	PartitionKey    string          `json:"partitionkey,omitempty"`
	TenantID        string          `json:"tenantid,omitempty"`
	Topic           string          `json:"topic,omitempty"`
	EventVersion    int             `json:"eventversion,omitempty"`
	Attempt         int             `json:"attempt,omitempty"`
	TraceParent     string          `json:"traceparent,omitempty"`
	TraceState      string          `json:"tracestate,omitempty"`
	Headers         string          `json:"headers,omitempty"`
}

// headers carried as their own CloudEvents attributes, not in "headers".
var attributeHeaders = []string{"traceparent", "tracestate", "content-type"}

// MarshalJSON encodes e as a CloudEvents 1.0 structured-mode JSON event.
func (e *Envelope) MarshalJSON() ([]byte, error) {
	ce, err := e.cloudEvent()
	if err != nil {
		return nil, err
	}
	return json.Marshal(&ce)
}

// cloudEvent returns e's CloudEvents attributes.
func (e *Envelope) cloudEvent() (cloudEvent, error) {
	ce := cloudEvent{
		SpecVersion:     "1.0",
		ID:              e.ID,
		Source:          e.Source,
		Type:            e.Type,
		DataContentType: e.ContentType(),
		AggregateType:   e.AggregateType,
		AggregateID:     e.AggregateID,
		PartitionKey:    e.PartitionKey,
		TenantID:        e.TenantID,
		Topic:           e.Topic,
		EventVersion:    e.Version,
		Attempt:         e.Attempt,
		TraceParent:     e.Headers["traceparent"],
		TraceState:      e.Headers["tracestate"],
	}
	if ce.Source == "" {
		ce.Source = DefaultSource
	}
	switch {
	case e.AggregateType != "" && e.AggregateID != "":
		ce.Subject = e.AggregateType + "/" + e.AggregateID
	default:
		ce.Subject = e.AggregateID
	}
	if !e.CreatedAt.IsZero() {
		t := e.CreatedAt.UTC()
		ce.Time = &t
	}
	if len(e.Payload) > 0 {
		// json.Valid takes bytes that are not UTF-8 inside strings; as
		// data they would make the event JSON that is not UTF-8.
		if strings.Contains(ce.DataContentType, "json") && utf8.Valid(e.Payload) && json.Valid(e.Payload) {
			ce.Data = e.Payload
		} else {
			ce.DataBase64 = base64.StdEncoding.EncodeToString(e.Payload)
		}
	}
	if rest := otherHeaders(e.Headers); len(rest) > 0 {
		b, err := json.Marshal(rest)
		if err != nil {
			return cloudEvent{}, fmt.Errorf("outbox: encoding headers of event %s: %w", e.ID, err)
		}
		ce.Headers = string(b)
	}
	return ce, nil
}

func otherHeaders(h map[string]string) map[string]string {
	var rest map[string]string
	for k, v := range h {
		if !isAttributeHeader(k) {
			if rest == nil {
				rest = make(map[string]string, len(h))
			}
			rest[k] = v
		}
	}
	return rest
}

func isAttributeHeader(k string) bool {
	for _, a := range attributeHeaders {
		if k == a {
			return true
		}
	}
	return false
}

// DecodeEnvelope parses a CloudEvents 1.0 structured-mode JSON event, as
// written by Envelope.MarshalJSON. It fails with an error wrapping
// ErrInvalidEnvelope on malformed JSON, a specversion other than 1.0, a
// missing id, source or type, both data and data_base64, or attributes of
// the wrong type.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	var ce cloudEvent
	if err := decodeStrict(b, &ce); err != nil {
		return nil, err
	}
	return ce.envelope()
}

// decodeStrict decodes one JSON object from b into v, refusing trailing
// data (json.Unmarshal does).
func decodeStrict(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidEnvelope, err)
	}
	return nil
}

// envelope validates ce and returns its Envelope.
func (ce *cloudEvent) envelope() (*Envelope, error) {
	if err := ce.validate(); err != nil {
		return nil, err
	}
	e := &Envelope{
		ID:            ce.ID,
		Type:          ce.Type,
		Source:        ce.Source,
		AggregateType: ce.AggregateType,
		AggregateID:   ce.AggregateID,
		PartitionKey:  ce.PartitionKey,
		TenantID:      ce.TenantID,
		Topic:         ce.Topic,
		Version:       ce.EventVersion,
		Attempt:       ce.Attempt,
	}
	if ce.Time != nil {
		e.CreatedAt = *ce.Time
	}
	var err error
	if e.Payload, err = ce.payload(); err != nil {
		return nil, err
	}
	if e.Headers, err = ce.headers(e.Payload); err != nil {
		return nil, err
	}
	return e, nil
}

// validate checks the attributes DecodeEnvelope requires.
func (ce *cloudEvent) validate() error {
	switch {
	case ce.SpecVersion != "1.0":
		return fmt.Errorf("%w: specversion %q, want \"1.0\"", ErrInvalidEnvelope, ce.SpecVersion)
	case ce.ID == "":
		return fmt.Errorf("%w: id is required", ErrInvalidEnvelope)
	case ce.Source == "":
		return fmt.Errorf("%w: source is required", ErrInvalidEnvelope)
	case ce.Type == "":
		return fmt.Errorf("%w: type is required", ErrInvalidEnvelope)
	case len(ce.Data) > 0 && ce.DataBase64 != "":
		return fmt.Errorf("%w: both data and data_base64 are set", ErrInvalidEnvelope)
	case ce.Attempt < 0 || ce.EventVersion < 0:
		return fmt.Errorf("%w: negative attempt or eventversion", ErrInvalidEnvelope)
	}
	return nil
}

// payload returns the event's data (nil for none, or JSON null).
func (ce *cloudEvent) payload() ([]byte, error) {
	switch {
	case ce.DataBase64 != "":
		p, err := base64.StdEncoding.DecodeString(ce.DataBase64)
		if err != nil {
			return nil, fmt.Errorf("%w: data_base64: %v", ErrInvalidEnvelope, err)
		}
		return p, nil
	case len(ce.Data) > 0 && !bytes.Equal(ce.Data, []byte("null")):
		return bytes.Clone(ce.Data), nil
	}
	return nil, nil
}

// headers returns the envelope's headers (nil for none): the headers
// extension, the trace context, and datacontenttype where it says more
// than those headers and the payload do.
func (ce *cloudEvent) headers(payload []byte) (map[string]string, error) {
	headers := map[string]string{}
	if ce.Headers != "" {
		if err := json.Unmarshal([]byte(ce.Headers), &headers); err != nil {
			return nil, fmt.Errorf("%w: headers: %v", ErrInvalidEnvelope, err)
		}
	}
	for k, v := range map[string]string{"traceparent": ce.TraceParent, "tracestate": ce.TraceState} {
		if v != "" {
			headers[k] = v
		}
	}
	// Keep a content type only where it says more than the payload does.
	if ct := ce.DataContentType; ct != "" && ct != (&Envelope{Payload: payload, Headers: headers}).ContentType() {
		headers["content-type"] = ct
	}
	if len(headers) == 0 {
		return nil, nil
	}
	return headers, nil
}
