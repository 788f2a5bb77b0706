package outbox

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// decodeWALFast decodes the content of a WAL message as written by
// WALMessage.MarshalJSON, without reflection: the streaming relay decodes
// every event, and encoding/json spent most of its time. It handles the
// attributes of walCloudEvent with plain values; on anything else (an
// escaped string, a null, a malformed document) it reports false, and the
// caller decodes with encoding/json, whose result (and error) stands. For
// the documents it accepts, the result is encoding/json's.
func decodeWALFast(b []byte, w *walCloudEvent) bool {
	p := fastJSON{b: b}
	if !p.byte('{') {
		return false
	}
	if p.peek('}') {
		return p.end()
	}
	for {
		key, ok := p.strBytes()
		if !ok || !p.byte(':') || !p.field(w, key) {
			return false
		}
		if p.peek('}') {
			break
		}
		if !p.byte(',') {
			return false
		}
	}
	return p.end()
}

// fastJSON reads b from i.
type fastJSON struct {
	b []byte
	i int
}

func (p *fastJSON) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// byte consumes c after whitespace.
func (p *fastJSON) byte(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// peek consumes c after whitespace if it is next.
func (p *fastJSON) peek(c byte) bool { return p.byte(c) }

// end reports whether only whitespace is left.
func (p *fastJSON) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// str reads a string of valid UTF-8 without escapes or control
// characters.
func (p *fastJSON) str() (string, bool) {
	b, ok := p.strBytes()
	return string(b), ok
}

// strBytes is str without the copy.
func (p *fastJSON) strBytes() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start, ascii := p.i, true
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			b := p.b[start:p.i]
			p.i++
			return b, ascii || utf8.Valid(b)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		p.i++
	}
	return nil, false
}

// integer reads a JSON integer that fits an int (no leading zero, no
// fraction: those go to encoding/json).
func (p *fastJSON) integer() (int, bool) {
	p.ws()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.b[digits] == '0' && p.i-digits > 1) {
		return 0, false
	}
	n, err := strconv.Atoi(string(p.b[start:p.i]))
	return n, err == nil
}

// timeOf reads an RFC 3339 string.
func (p *fastJSON) timeOf() (*time.Time, bool) {
	s, ok := p.str()
	if !ok {
		return nil, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return &t, err == nil
}

// raw reads any JSON value and returns its bytes (not a copy: the
// envelope copies its payload), checked with json.Valid.
func (p *fastJSON) raw() (json.RawMessage, bool) {
	p.ws()
	start := p.i
	if p.i >= len(p.b) {
		return nil, false
	}
	switch p.b[p.i] {
	case '"':
		p.skipString()
	case '{', '[':
		depth := 0
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				p.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			p.i++
			if depth == 0 {
				break
			}
		}
	default:
		for p.i < len(p.b) && !isDelim(p.b[p.i]) {
			p.i++
		}
	}
	v := p.b[start:p.i]
	if len(v) == 0 || !json.Valid(v) {
		return nil, false
	}
	return json.RawMessage(v), true
}

// skipString moves past the string that starts at i.
func (p *fastJSON) skipString() {
	for p.i++; p.i < len(p.b); p.i++ {
		switch p.b[p.i] {
		case '\\':
			p.i++
		case '"':
			p.i++
			return
		}
	}
}

func isDelim(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// field reads the value of key into w.
func (p *fastJSON) field(w *walCloudEvent, key []byte) bool {
	var ok bool
	switch string(key) {
	case "data":
		w.Data, ok = p.raw()
	case "eventversion":
		w.EventVersion, ok = p.integer()
	case "attempt":
		w.Attempt, ok = p.integer()
	case "maxattempts":
		w.MaxAttempts, ok = p.integer()
	case "time":
		w.Time, ok = p.timeOf()
	case "availableat":
		w.AvailableAt, ok = p.timeOf()
	default:
		dst := w.stringField(string(key))
		if dst == nil {
			return false // an attribute this decoder does not know: encoding/json's
		}
		*dst, ok = p.str()
	}
	return ok
}

// stringField returns the string attribute named key, or nil.
func (w *walCloudEvent) stringField(key string) *string {
	switch key {
	case "specversion":
		return &w.SpecVersion
	case "id":
		return &w.ID
	case "source":
		return &w.Source
	case "type":
		return &w.Type
	case "subject":
		return &w.Subject
	case "datacontenttype":
		return &w.DataContentType
	case "data_base64":
		return &w.DataBase64
	case "aggregatetype":
		return &w.AggregateType
	case "aggregateid":
		return &w.AggregateID
	case "partitionkey":
		return &w.PartitionKey
	case "tenantid":
		return &w.TenantID
	case "topic":
		return &w.Topic
	case "traceparent":
		return &w.TraceParent
	case "tracestate":
		return &w.TraceState
	case "headers":
		return &w.Headers
	}
	return nil
}
