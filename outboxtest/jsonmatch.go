package outboxtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"
)

// decodeJSON decodes one JSON value, numbers kept as json.Number so that
// they compare exactly.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// jsonDiff returns "" when have matches want, and otherwise the first
// difference, as "<path> is <have>, want <want>". Objects match when they
// have the same keys (with subset, when have holds at least want's keys)
// and matching values; arrays when they have the same length and matching
// elements; numbers when they are equal as numbers (1, 1.0 and 1e0 are
// equal); strings, booleans and null when they are equal.
func jsonDiff(path string, have, want any, subset bool) string {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s is %s, want an object", path, short(have))
		}
		for _, k := range sortedKeys(w) {
			hv, ok := h[k]
			if !ok {
				return fmt.Sprintf("%s is missing, want %s", member(path, k), short(w[k]))
			}
			if d := jsonDiff(member(path, k), hv, w[k], subset); d != "" {
				return d
			}
		}
		if !subset {
			for _, k := range sortedKeys(h) {
				if _, ok := w[k]; !ok {
					return fmt.Sprintf("%s is %s, not expected", member(path, k), short(h[k]))
				}
			}
		}
		return ""
	case []any:
		h, ok := have.([]any)
		if !ok {
			return fmt.Sprintf("%s is %s, want an array", path, short(have))
		}
		for i := range min(len(h), len(w)) {
			if d := jsonDiff(path+"["+strconv.Itoa(i)+"]", h[i], w[i], subset); d != "" {
				return d
			}
		}
		if len(h) != len(w) {
			return fmt.Sprintf("%s has %d %s, want %d", path, len(h), plural(len(h), "element", "elements"), len(w))
		}
		return ""
	case json.Number:
		if h, ok := have.(json.Number); ok && numbersEqual(h, w) {
			return ""
		}
	default: // string, bool, nil
		if have == want {
			return ""
		}
	}
	return fmt.Sprintf("%s is %s, want %s", path, short(have), short(want))
}

// numbersEqual compares two JSON numbers exactly.
func numbersEqual(a, b json.Number) bool {
	if a == b {
		return true
	}
	const maxExact = 64 // beyond that, compare the text: big exponents cost
	if len(a) > maxExact || len(b) > maxExact {
		return false
	}
	x, ok1 := new(big.Rat).SetString(string(a))
	y, ok2 := new(big.Rat).SetString(string(b))
	return ok1 && ok2 && x.Cmp(y) == 0
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// member returns the path of key k of the object at path.
func member(path, k string) string {
	for i, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return path + "[" + strconv.Quote(k) + "]"
		}
	}
	if k == "" {
		return path + `[""]`
	}
	return path + "." + k
}

// maxShown bounds the characters of a value or payload in a message.
const maxShown = 60

// short returns a JSON value as compact text of at most maxShown
// characters.
func short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return truncate(string(b), maxShown)
}

// truncate cuts s to max characters, marking the cut.
func truncate(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max]) + "…"
}

// payloadSummary describes a payload in a message without dumping it:
// compact JSON cut to maxShown characters, with its size when cut, or the
// size of a payload that is not JSON.
func payloadSummary(p []byte) string {
	switch {
	case len(p) == 0:
		return "none"
	case !json.Valid(p):
		return fmt.Sprintf("%d bytes, not JSON", len(p))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, p); err != nil {
		return fmt.Sprintf("%d bytes", len(p))
	}
	s := buf.String()
	if utf8.RuneCountInString(s) <= maxShown {
		return s
	}
	return fmt.Sprintf("%s (%d bytes)", truncate(s, maxShown), len(p))
}
