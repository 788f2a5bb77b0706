package outbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
)

func TestEnvelopeCloudEventsJSON(t *testing.T) {
	e := &outbox.Envelope{
		ID: "01J0", Type: "order.created", AggregateType: "order", AggregateID: "42",
		PartitionKey: "customer-7", TenantID: "acme", Topic: "orders", Source: "/shop",
		Version: 2, Attempt: 3, Payload: []byte(`{"total":10}`),
		Headers:   map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-request-id": "r1"},
		CreatedAt: time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC),
	}
	b, err := json.Marshal(e)
	must(t, err)
	var got map[string]any
	must(t, json.Unmarshal(b, &got))
	want := map[string]any{
		"specversion": "1.0", "id": "01J0", "source": "/shop", "type": "order.created",
		"subject": "order/42", "time": "2026-11-29T12:00:00.123456789Z", "datacontenttype": "application/json",
		"data": map[string]any{"total": float64(10)}, "aggregatetype": "order", "aggregateid": "42",
		"partitionkey": "customer-7", "tenantid": "acme", "topic": "orders", "eventversion": float64(2),
		"attempt": float64(3), "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"headers": `{"x-request-id":"r1"}`,
	}
	for k, v := range want {
		if gv, _ := json.Marshal(got[k]); string(gv) != mustJSON(v) {
			t.Errorf("%s = %s, want %s", k, gv, mustJSON(v))
		}
	}
	if len(got) != len(want) {
		t.Errorf("attributes %v", got)
	}
	back, err := outbox.DecodeEnvelope(b)
	must(t, err)
	if !sameEnvelope(e, back) {
		t.Errorf("round trip:\n%+v\n%+v", e, back)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestEnvelopeBinaryPayload(t *testing.T) {
	e := &outbox.Envelope{ID: "b", Type: "blob", Payload: []byte{0, 1, 0xff}}
	b, err := json.Marshal(e)
	must(t, err)
	if !bytes.Contains(b, []byte(`"data_base64":"AAH/"`)) || !bytes.Contains(b, []byte(`"datacontenttype":"application/octet-stream"`)) {
		t.Errorf("binary payload encoded as %s", b)
	}
	back, err := outbox.DecodeEnvelope(b)
	must(t, err)
	if !bytes.Equal(back.Payload, e.Payload) || back.Source != outbox.DefaultSource {
		t.Errorf("decoded %+v", back)
	}
}

// A payload that json.Valid accepts but that is not UTF-8 (a JSON string
// holding the byte 0xff, as a json.RawMessage given to Emit may be) is
// data_base64: as data, the CloudEvent was not UTF-8, which JSON requires
// (the CLI's escaped output turned it into \xff, which no decoder reads).
// It decodes to the same bytes.
func TestEnvelopeJSONPayloadNotUTF8(t *testing.T) {
	e := &outbox.Envelope{ID: "j", Type: "t", Payload: []byte("{\"s\":\"a\xffb\"}")}
	b, err := json.Marshal(e)
	must(t, err)
	if !utf8.Valid(b) || !bytes.Contains(b, []byte(`"data_base64":`)) {
		t.Errorf("a JSON payload that is not UTF-8 encoded as %q", b)
	}
	back, err := outbox.DecodeEnvelope(b)
	must(t, err)
	if !bytes.Equal(back.Payload, e.Payload) {
		t.Errorf("decoded payload %q, want %q", back.Payload, e.Payload)
	}
}

func TestDecodeEnvelopeRejectsMalformedInput(t *testing.T) {
	for _, in := range []string{
		``, `null`, `[]`, `{`, `"x"`,
		`{"specversion":"0.3","id":"1","source":"s","type":"t"}`,
		`{"specversion":"1.0","source":"s","type":"t"}`,
		`{"specversion":"1.0","id":"1","type":"t"}`,
		`{"specversion":"1.0","id":"1","source":"s"}`,
		`{"specversion":"1.0","id":"1","source":"s","type":"t","data":{},"data_base64":"AA=="}`,
		`{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"!!"}`,
		`{"specversion":"1.0","id":"1","source":"s","type":"t","attempt":"one"}`,
		`{"specversion":"1.0","id":"1","source":"s","type":"t","attempt":-1}`,
		`{"specversion":"1.0","id":"1","source":"s","type":"t","time":"yesterday"}`,
		`{"specversion":"1.0","id":"1","source":"s","type":"t","headers":"{not json"}`,
		`{"specversion":"1.0","id":"1","source":"s","type":"t"} trailing`,
	} {
		if _, err := outbox.DecodeEnvelope([]byte(in)); !errors.Is(err, outbox.ErrInvalidEnvelope) {
			t.Errorf("DecodeEnvelope(%s): err = %v, want ErrInvalidEnvelope", in, err)
		}
	}
}

// sameEnvelope compares envelopes as consumers see them: JSON payloads by
// value, content types by meaning.
func sameEnvelope(a, b *outbox.Envelope) bool {
	strip := func(h map[string]string) map[string]string {
		m := maps.Clone(h)
		delete(m, "content-type")
		if len(m) == 0 {
			return nil
		}
		return m
	}
	src := func(s string) string {
		if s == "" {
			return outbox.DefaultSource
		}
		return s
	}
	return a.ID == b.ID && a.Type == b.Type && a.AggregateType == b.AggregateType && a.AggregateID == b.AggregateID &&
		a.PartitionKey == b.PartitionKey && a.TenantID == b.TenantID && a.Topic == b.Topic && src(a.Source) == src(b.Source) &&
		a.Version == b.Version && a.Attempt == b.Attempt && a.CreatedAt.Equal(b.CreatedAt) &&
		samePayload(a.Payload, b.Payload) && a.ContentType() == b.ContentType() && maps.Equal(strip(a.Headers), strip(b.Headers))
}

func samePayload(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && mustJSON(x) == mustJSON(y)
}

// FuzzDecodeEnvelope: any input either fails with ErrInvalidEnvelope or
// decodes to an envelope that survives a re-encoding unchanged.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","data":{"a":[1,2]},"attempt":2,"headers":"{\"k\":\"v\"}"}`))
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"AAH/","datacontenttype":"image/png"}`))
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","time":"2026-11-29T12:00:00Z","traceparent":"00-x"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := outbox.DecodeEnvelope(in)
		if err != nil {
			if !errors.Is(err, outbox.ErrInvalidEnvelope) {
				t.Fatalf("error %v does not wrap ErrInvalidEnvelope", err)
			}
			return
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", e, err)
		}
		again, err := outbox.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("decoding the re-encoding %s: %v", b, err)
		}
		if !sameEnvelope(e, again) {
			t.Fatalf("re-encoding changed the envelope:\n%+v\n%+v", e, again)
		}
	})
}

// FuzzEnvelopeRoundTrip: every envelope of valid UTF-8 strings encodes and
// decodes to itself.
func FuzzEnvelopeRoundTrip(f *testing.F) {
	f.Add("id", "type", "agg", "42", "key", "tenant", "topic", "/src", 1, 1, []byte(`{"a":1}`), "k", "v", int64(0))
	f.Add("x", "y", "", "", "", "", "", "", 0, 0, []byte{0xff, 0}, "content-type", "application/cbor", int64(1e18))
	f.Fuzz(func(t *testing.T, id, typ, aggType, aggID, key, tenant, topic, source string, version, attempt int, payload []byte, hk, hv string, nanos int64) {
		for _, s := range []string{id, typ, aggType, aggID, key, tenant, topic, source, hk, hv} {
			if !utf8.ValidString(s) {
				return
			}
		}
		if id == "" || typ == "" || version < 0 || attempt < 0 || strings.TrimSpace(hk) == "" {
			return
		}
		e := &outbox.Envelope{ID: id, Type: typ, AggregateType: aggType, AggregateID: aggID, PartitionKey: key,
			TenantID: tenant, Topic: topic, Source: source, Version: version, Attempt: attempt, Payload: payload,
			Headers: map[string]string{hk: hv}, CreatedAt: time.Unix(0, nanos).UTC()}
		if len(payload) == 0 {
			e.Payload = nil
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := outbox.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("decoding %s: %v", b, err)
		}
		if !sameEnvelope(e, back) {
			t.Fatalf("round trip of %s:\n%+v\n%+v", b, e, back)
		}
	})
}
