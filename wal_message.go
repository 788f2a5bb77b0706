package outbox

import (
	"encoding/json"
	"fmt"
	"time"
)

// WALPrefixBase starts the prefix of every logical decoding message WAL
// mode writes; the outbox table's name follows it (WALPrefix).
const WALPrefixBase = "gorm-outbox:"

// WALPrefix returns the prefix of the logical decoding messages that WAL
// mode writes for the outbox table: "gorm-outbox:" and the table's name,
// such as "gorm-outbox:outbox_events".
func WALPrefix(table string) string { return WALPrefixBase + table }

// WALMessage is one event as WAL mode writes it: the content of a
// transactional logical decoding message
//
//	pg_logical_emit_message(true, WALPrefix(table), <content>)
//
// written in the caller's transaction. Its content is UTF-8 JSON: the
// event's CloudEvents 1.0 structured-mode form (Envelope.MarshalJSON:
// specversion, id, source, type, subject, time, datacontenttype, data or
// data_base64, and the extensions aggregatetype, aggregateid,
// partitionkey, tenantid, topic, eventversion, traceparent, tracestate,
// headers), where time is when the event was written, plus two extensions
// the relay needs:
//
//   - maxattempts: the event's Event.MaxAttempts, when set (an integer);
//   - availableat: the event's Event.AvailableAt, when set (an RFC 3339
//     timestamp with nanoseconds, UTC).
//
// attempt is absent. Any reader of PostgreSQL's logical decoding messages
// can consume the stream: pgoutput with messages 'true', wal2json, or
// Debezium's PostgreSQL connector, whose message events carry the prefix
// and the content.
type WALMessage struct {
	Envelope    *Envelope
	MaxAttempts int
	AvailableAt time.Time // zero: available at once
}

// walCloudEvent is the JSON of a WALMessage.
type walCloudEvent struct {
	cloudEvent
	MaxAttempts int        `json:"maxattempts,omitempty"`
	AvailableAt *time.Time `json:"availableat,omitempty"`
}

// MarshalJSON encodes m as DecodeWALMessage reads it.
func (m *WALMessage) MarshalJSON() ([]byte, error) {
	if m.Envelope == nil {
		return nil, fmt.Errorf("%w: a WAL message without its envelope", ErrInvalidEnvelope)
	}
	ce, err := m.Envelope.cloudEvent()
	if err != nil {
		return nil, err
	}
	w := walCloudEvent{cloudEvent: ce, MaxAttempts: m.MaxAttempts}
	if !m.AvailableAt.IsZero() {
		t := m.AvailableAt.UTC()
		w.AvailableAt = &t
	}
	return json.Marshal(&w)
}

// DecodeWALMessage parses the content of a WAL mode message. It fails
// with an error wrapping ErrInvalidEnvelope where DecodeEnvelope would, and
// on a negative maxattempts.
func DecodeWALMessage(b []byte) (*WALMessage, error) {
	var w walCloudEvent
	if !decodeWALFast(b, &w) {
		w = walCloudEvent{}
		if err := decodeStrict(b, &w); err != nil {
			return nil, err
		}
	}
	if w.MaxAttempts < 0 {
		return nil, fmt.Errorf("%w: negative maxattempts", ErrInvalidEnvelope)
	}
	env, err := w.envelope()
	if err != nil {
		return nil, err
	}
	m := &WALMessage{Envelope: env, MaxAttempts: w.MaxAttempts}
	if w.AvailableAt != nil {
		m.AvailableAt = *w.AvailableAt
	}
	return m, nil
}

// walContent encodes e as a WAL message written at now (appendWALContent).
func walContent(e *encodedEvent, now time.Time) (string, error) {
	var headers map[string]string
	if len(e.Headers) > 0 {
		if err := json.Unmarshal(e.Headers, &headers); err != nil {
			return "", fmt.Errorf("outbox: headers of event %s: %w", e.EventID, err)
		}
	}
	b, err := appendWALContent(make([]byte, 0, 256+len(e.Payload)), e, headers, now)
	if err != nil {
		return "", fmt.Errorf("outbox: encoding event %s: %w", e.EventID, err)
	}
	return string(b), nil
}
