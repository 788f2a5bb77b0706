package outbox

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// checkWALEncode fails t unless the appended content decodes to what
// WALMessage.MarshalJSON's content of the same event decodes to.
func checkWALEncode(t *testing.T, e *encodedEvent) {
	t.Helper()
	now := time.Date(2032, 1, 2, 3, 4, 5, 678, time.UTC)
	var headers map[string]string
	if len(e.Headers) > 0 {
		if err := json.Unmarshal(e.Headers, &headers); err != nil {
			t.Skip()
		}
	}
	got, err := appendWALContent(nil, e, headers, now)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(got) {
		t.Fatalf("invalid JSON: %s", got)
	}
	m := WALMessage{Envelope: &Envelope{ID: e.EventID, Type: e.Type, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		PartitionKey: e.PartitionKey, TenantID: e.TenantID, Topic: e.Topic, Version: e.Version, Payload: e.Payload, Headers: headers,
		CreatedAt: now}, MaxAttempts: e.MaxAttempts}
	if e.AvailableAt != nil {
		m.AvailableAt = *e.AvailableAt
	}
	want, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	a, errA := DecodeWALMessage(got)
	b, errB := DecodeWALMessage(want)
	if (errA == nil) != (errB == nil) {
		t.Fatalf("decoding: %v vs %v\n%s\n%s", errA, errB, got, want)
	}
	if errA != nil {
		return
	}
	if !bytes.Equal(a.Envelope.Payload, e.Payload) {
		t.Fatalf("payload %q, written %q", a.Envelope.Payload, e.Payload)
	}
	b.Envelope.Payload = a.Envelope.Payload // MarshalJSON compacts a JSON payload
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("\nappended %s\nmarshal  %s\n%+v\n%+v", got, want, a.Envelope, b.Envelope)
	}
}

func TestAppendWALContentMatchesMarshalJSON(t *testing.T) {
	at := time.Date(2031, 5, 6, 7, 8, 9, 10, time.UTC)
	for _, e := range []encodedEvent{
		{EventID: "a", Type: "t"},
		{EventID: "b\"\\\n\t\x01<>&\u2028é", Type: "order.placed", AggregateType: "order", AggregateID: "42", PartitionKey: "k\x7f",
			TenantID: "x", Topic: "q", Version: 3, Payload: []byte(`{"n":1}`), MaxAttempts: 5, AvailableAt: &at,
			Headers: []byte(`{"traceparent":"00-a-b-01","tracestate":"x=1","actor":"ada","content-type":"application/cloudevents+json"}`)},
		{EventID: "c", Type: "t", Payload: []byte{0, 1, 255}},
		{EventID: "d", Type: "t", Payload: []byte(`not json`), Headers: []byte(`{"content-type":"text/plain"}`)},
		{EventID: "e\xff", Type: "t", AggregateID: "only-id", Payload: []byte(` [1, 2] `)},
	} {
		checkWALEncode(t, &e)
	}
}

func FuzzAppendWALContent(f *testing.F) {
	f.Add("id", "type", "agg", "42", "key", []byte(`{"a":1}`), []byte(`{"h":"v"}`), 3)
	f.Add("\"", "\x00\u2028", "", "\xff", "<&>", []byte{0xff}, []byte(nil), 0)
	f.Fuzz(func(t *testing.T, id, typ, aggType, aggID, key string, payload, headers []byte, maxAttempts int) {
		if len(headers) > 0 && !json.Valid(headers) || bytes.Equal(headers, []byte("null")) {
			return
		}
		checkWALEncode(t, &encodedEvent{EventID: id, Type: typ, AggregateType: aggType, AggregateID: aggID, PartitionKey: key,
			Payload: payload, Headers: headers, MaxAttempts: maxAttempts, Version: 1})
	})
}
