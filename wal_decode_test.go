package outbox

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// walSamples are WAL message contents: as MarshalJSON writes them, and
// documents only encoding/json decodes (escapes, nulls, other spacing).
func walSamples(t testing.TB) [][]byte {
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	var out [][]byte
	for _, m := range []*WALMessage{
		{Envelope: &Envelope{ID: "a", Type: "t"}},
		{Envelope: &Envelope{ID: "b", Type: "order.placed", AggregateType: "order", AggregateID: "42", PartitionKey: "k", TenantID: "x",
			Topic: "q", Version: 3, Payload: []byte(`{"n":[1,2,{"s":"}]\""}],"f":1.5e3,"t":true,"z":null}`), CreatedAt: at,
			Headers: map[string]string{"traceparent": "00-abc-def-01", "actor": "ada", "<": "&"}}, MaxAttempts: 7, AvailableAt: at},
		{Envelope: &Envelope{ID: "c", Type: "t", Payload: []byte{0, 1, 2, 255}}},
		{Envelope: &Envelope{ID: "d", Type: "t", Payload: []byte(`"a string"`)}},
		{Envelope: &Envelope{ID: "e", Type: "t", Payload: []byte(`12`)}},
		{Envelope: &Envelope{ID: "é✓", Type: "t", Payload: []byte(`[]`)}},
	} {
		b, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	for _, s := range []string{
		`{"specversion":"1.0","id":"x\"y","source":"s","type":"t"}`,
		`{ "specversion" : "1.0" , "id" : "x" , "source":"s","type":"t", "data" : { "a" : 1 } , "maxattempts" : 2 }`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t","subject":null}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t","maxattempts":01}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t","maxattempts":1.5}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t","data":{"a":}}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t","unknown":[1,{"a":"]"}]}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t"} trailing`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t","time":"2020-01-02T03:04:05Z","availableat":"bad"}`,
		`{"specversion":"1.0","id":"x","source":"s","type":"t","eventversion":-0}`,
		`{}`, `[]`, ``, `{"id":"x",}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// decodeWALFast accepts only what encoding/json decodes to the same value.
func TestDecodeWALFastMatchesEncodingJSON(t *testing.T) {
	for _, b := range walSamples(t) {
		checkFastDecode(t, b)
	}
}

func FuzzDecodeWALFast(f *testing.F) {
	for _, b := range walSamples(f) {
		f.Add(b)
	}
	f.Fuzz(checkFastDecode)
}

func checkFastDecode(t *testing.T, b []byte) {
	var fast walCloudEvent
	if !decodeWALFast(b, &fast) {
		return // encoding/json decides
	}
	var want walCloudEvent
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: the fast decoder accepted what encoding/json refuses: %v", b, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("%s:\nfast %+v\njson %+v", b, fast, want)
	}
}

func BenchmarkDecodeWALMessage(b *testing.B) {
	m := &WALMessage{Envelope: &Envelope{ID: "0193a5d2-7c1e-7cc0-8f7e-1b2c3d4e5f60", Type: "order.created", AggregateType: "order",
		AggregateID: "12345", Payload: []byte(`{"order_id":12345,"customer":"customer","amount":12.34}`), CreatedAt: time.Now(),
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}
	content, _ := m.MarshalJSON()
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeWALMessage(content); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var w walCloudEvent
			if err := decodeStrict(content, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
}
