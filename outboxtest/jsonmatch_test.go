package outboxtest

import (
	"strings"
	"testing"
)

func TestJSONDiff(t *testing.T) {
	for _, c := range []struct {
		have, want string
		subset     bool
		diff       string // "" when they match
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1.0,2e0],"a":1}`, false, ""},
		{`{"a":1,"b":2}`, `{"a":1}`, true, ""},
		{`{"a":1,"b":2}`, `{"a":1}`, false, `payload.b is 2, not expected`},
		{`{"a":{"b":{"c":"x"}}}`, `{"a":{"b":{"c":"y"}}}`, true, `payload.a.b.c is "x", want "y"`},
		{`{"a":[{"s":"x","q":1}]}`, `{"a":[{"s":"x"}]}`, true, ""},
		{`{"a":[1]}`, `{"a":[1,2]}`, true, `payload.a has 1 element, want 2`},
		{`{"a":[1,3]}`, `{"a":[1,2]}`, true, `payload.a[1] is 3, want 2`},
		{`{"a":1}`, `{"b":1}`, true, `payload.b is missing, want 1`},
		{`{"a b":1}`, `{"a b":2}`, true, `payload["a b"] is 1, want 2`},
		{`[1]`, `{"a":1}`, true, `payload is [1], want an object`},
		{`{"a":"1"}`, `{"a":1}`, true, `payload.a is "1", want 1`},
		{`{"a":null}`, `{"a":null}`, false, ""},
		{`{"a":true}`, `{"a":false}`, false, `payload.a is true, want false`},
		{`12345678901234567890`, `12345678901234567891`, false, `payload is 12345678901234567890, want 12345678901234567891`},
		{`0.1`, `1e-1`, false, ""},
	} {
		have, err := decodeJSON([]byte(c.have))
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeJSON([]byte(c.want))
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonDiff("payload", have, want, c.subset); got != c.diff {
			t.Errorf("jsonDiff(%s, %s, subset %v) = %q, want %q", c.have, c.want, c.subset, got, c.diff)
		}
	}
}

func TestPayloadSummary(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "none"},
		{"{\n  \"a\": 1\n}", `{"a":1}`},
		{"\xff\x00", "2 bytes, not JSON"},
		{`"` + strings.Repeat("é", 100) + `"`, `"` + strings.Repeat("é", 59) + `… (202 bytes)`},
	} {
		if got := payloadSummary([]byte(c.in)); got != c.want {
			t.Errorf("payloadSummary(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
