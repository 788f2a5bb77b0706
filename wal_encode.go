package outbox

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendWALContent appends the content of the WAL message of e, written at
// now, without reflection: the write path encodes every event. It holds
// the attributes WALMessage.MarshalJSON writes, in its order, with JSON
// strings escaped as JSON requires (encoding/json also escapes <, > and
// &; both decode to the same values), and the payload as written
// (encoding/json would compact a JSON payload; one with whitespace around
// it goes as data_base64). headers are e's, decoded.
func appendWALContent(b []byte, e *encodedEvent, headers map[string]string, now time.Time) ([]byte, error) {
	env := Envelope{Payload: e.Payload, Headers: headers}
	b = append(b, `{"specversion":"1.0","id":`...)
	b = appendJSONString(b, e.EventID)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, DefaultSource)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.Type)
	subject := e.AggregateID
	if e.AggregateType != "" && e.AggregateID != "" {
		subject = e.AggregateType + "/" + e.AggregateID
	}
	b = appendAttr(b, "subject", subject)
	b = append(b, `,"time":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	ct := env.ContentType()
	b = appendAttr(b, "datacontenttype", ct)
	if len(e.Payload) > 0 {
		// As data only a JSON value without whitespace around it: a reader
		// gets back exactly the bytes written, as in table mode.
		if containsJSON(ct) && !isSpace(e.Payload[0]) && !isSpace(e.Payload[len(e.Payload)-1]) && json.Valid(e.Payload) {
			b = append(b, `,"data":`...)
			b = append(b, e.Payload...)
		} else {
			b = append(b, `,"data_base64":"`...)
			b = base64.StdEncoding.AppendEncode(b, e.Payload)
			b = append(b, '"')
		}
	}
	b = appendAttr(b, "aggregatetype", e.AggregateType)
	b = appendAttr(b, "aggregateid", e.AggregateID)
	b = appendAttr(b, "partitionkey", e.PartitionKey)
	b = appendAttr(b, "tenantid", e.TenantID)
	b = appendAttr(b, "topic", e.Topic)
	if e.Version != 0 {
		b = append(b, `,"eventversion":`...)
		b = strconv.AppendInt(b, int64(e.Version), 10)
	}
	b = appendAttr(b, "traceparent", headers["traceparent"])
	b = appendAttr(b, "tracestate", headers["tracestate"])
	if rest := otherHeaders(headers); len(rest) > 0 {
		h, err := json.Marshal(rest)
		if err != nil {
			return nil, err
		}
		b = appendAttr(b, "headers", string(h))
	}
	if e.MaxAttempts != 0 {
		b = append(b, `,"maxattempts":`...)
		b = strconv.AppendInt(b, int64(e.MaxAttempts), 10)
	}
	if e.AvailableAt != nil {
		b = append(b, `,"availableat":"`...)
		b = e.AvailableAt.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// containsJSON reports whether a content type names JSON.
func containsJSON(ct string) bool {
	for i := 0; i+4 <= len(ct); i++ {
		if ct[i:i+4] == "json" {
			return true
		}
	}
	return false
}

// appendAttr appends ,"name":"value" unless value is empty.
func appendAttr(b []byte, name, value string) []byte {
	if value == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, value)
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, U+2028
// and U+2029 escaped (as encoding/json does).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			default:
				b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
