package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// eventSchema is one registration: the payload type of an event type and
// version, and its checks.
type eventSchema struct {
	name         string // "order.created v2", for messages
	goType       reflect.Type
	required     []string // JSON field paths, dotted
	tenantField  []int    // index of the tenant field in goType (nil: none)
	tenantName   string   // its JSON name, for messages
	allowUnknown bool
	// needsValue: T is a struct (or a pointer), so that an event without
	// a payload (nil, a nil *T, JSON null, no bytes) is refused.
	needsValue bool
	// typed returns the payload as a T when it is a T or a non-nil *T.
	typed func(payload any) (any, bool)
	// decode decodes JSON into a T (strictly unless allowUnknown).
	decode   func(b []byte, allowUnknown bool) (any, error)
	validate func(v any) error
}

// RegisterOption adds a check to a registration (Register).
type RegisterOption func(*eventSchema) error

// Required names fields the payload must carry: each, a JSON field name or
// a dotted path into nested objects ("customer.id"), must be present, not
// null and not empty ("", [] or {}). Zero and false are values. Fields
// tagged `outbox:"required"` in the payload's struct are required too.
func Required(fields ...string) RegisterOption {
	return func(s *eventSchema) error {
		for _, f := range fields {
			if strings.TrimSpace(f) == "" || slices.Contains(strings.Split(f, "."), "") {
				return fmt.Errorf("Required: bad field path %q", f)
			}
			if !slices.Contains(s.required, f) {
				s.required = append(s.required, f)
			}
		}
		return nil
	}
}

// TenantField names the payload's string field (by its Go name) that
// holds the tenant: it must equal Event.TenantID (Envelope.TenantID at
// delivery). A field tagged `outbox:"tenant"` is the tenant field without
// this option.
func TenantField(goName string) RegisterOption {
	return func(s *eventSchema) error {
		st := s.goType
		if st.Kind() != reflect.Struct {
			return fmt.Errorf("TenantField(%q): %s is not a struct", goName, st)
		}
		f, ok := st.FieldByName(goName)
		if !ok || f.Type.Kind() != reflect.String || !f.IsExported() {
			return fmt.Errorf("TenantField(%q): %s has no exported string field %s", goName, st, goName)
		}
		s.tenantField, s.tenantName = f.Index, jsonName(f)
		return nil
	}
}

// AllowUnknownFields accepts payloads with JSON fields that the registered
// type does not have (refused by default, so that a payload written for
// another schema is found).
func AllowUnknownFields() RegisterOption {
	return func(s *eventSchema) error { s.allowUnknown = true; return nil }
}

// Validate adds fn as a check of the decoded payload: its error refuses
// the event (wrapped in ErrInvalidEvent). T must be the type given to
// Register.
func Validate[T any](fn func(T) error) RegisterOption {
	return func(s *eventSchema) error {
		if fn == nil {
			return errors.New("Validate: nil function")
		}
		if t := reflect.TypeFor[T](); t != s.goType {
			return fmt.Errorf("Validate: function of %s, the registered type is %s", t, s.goType)
		}
		prev := s.validate
		s.validate = func(v any) error {
			if prev != nil {
				if err := prev(v); err != nil {
					return err
				}
			}
			return fn(v.(T))
		}
		return nil
	}
}

func newSchema[T any](eventType string, version int) (*eventSchema, error) {
	t := reflect.TypeFor[T]()
	s := &eventSchema{
		name:       fmt.Sprintf("%s v%d", eventType, version),
		goType:     t,
		needsValue: t.Kind() == reflect.Struct || t.Kind() == reflect.Pointer,
		typed: func(p any) (any, bool) {
			switch v := p.(type) {
			case T:
				if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
					return nil, false
				}
				return v, true
			case *T:
				if v != nil {
					return *v, true
				}
			}
			return nil, false
		},
		decode: func(b []byte, allowUnknown bool) (any, error) {
			var v T
			dec := json.NewDecoder(bytes.NewReader(b))
			if !allowUnknown {
				dec.DisallowUnknownFields()
			}
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			if dec.More() {
				return nil, errors.New("trailing data after the JSON value")
			}
			return v, nil
		},
	}
	if t.Kind() == reflect.Struct {
		if err := s.readTags(t); err != nil {
			return nil, fmt.Errorf("%w: Register(%q, %d): %v", ErrInvalidConfig, eventType, version, err)
		}
	}
	return s, nil
}

// readTags takes the required and tenant fields from `outbox:"…"` tags of
// t's top-level fields.
func (s *eventSchema) readTags(t reflect.Type) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("outbox")
		if !ok {
			continue
		}
		for _, opt := range strings.Split(tag, ",") {
			switch strings.TrimSpace(opt) {
			case "required":
				s.required = append(s.required, jsonName(f))
			case "tenant":
				if f.Type.Kind() != reflect.String {
					return fmt.Errorf("field %s tagged outbox:\"tenant\" is not a string", f.Name)
				}
				s.tenantField, s.tenantName = f.Index, jsonName(f)
			case "":
			default:
				return fmt.Errorf("field %s: unknown outbox tag option %q (want required or tenant)", f.Name, opt)
			}
		}
	}
	return nil
}

// jsonName is the name encoding/json gives field f.
func jsonName(f reflect.StructField) string {
	if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
		return name
	}
	return f.Name
}

// check checks a payload: value is what the application gave (nil at
// delivery), payload its JSON, tenant the event's TenantID.
func (s *eventSchema) check(value any, payload []byte, tenant string) error {
	v, ok := s.typed(value)
	if !ok {
		b := bytes.TrimSpace(payload)
		if len(b) == 0 || string(b) == "null" {
			if s.needsValue {
				return invalid("Payload", "is missing (nil or JSON null); %s needs a %s", s.name, s.goType)
			}
			b = []byte("null")
		}
		var err error
		if v, err = s.decode(b, s.allowUnknown); err != nil {
			return invalid("Payload", "does not match %s (%s): %v", s.name, s.goType, err)
		}
	}
	if len(s.required) > 0 {
		if err := s.checkRequired(payload); err != nil {
			return err
		}
	}
	if s.tenantField != nil {
		if got := reflect.ValueOf(v).FieldByIndex(s.tenantField).String(); got != tenant {
			return invalid("TenantID", "is %q but the payload's %s is %q (%s)", tenant, s.tenantName, got, s.name)
		}
	}
	if s.validate != nil {
		if err := s.validate(v); err != nil {
			return invalid("Payload", "%s: %v", s.name, err)
		}
	}
	return nil
}

func (s *eventSchema) checkRequired(payload []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return invalid("Payload", "is not a JSON object; %s requires %s", s.name, strings.Join(s.required, ", "))
	}
	for _, path := range s.required {
		if !present(obj, strings.Split(path, ".")) {
			return invalid("Payload", "required field %q is missing or empty (%s)", path, s.name)
		}
	}
	return nil
}

// present reports whether the dotted path leads to a value that is not
// null, "", [] or {}.
func present(obj map[string]json.RawMessage, path []string) bool {
	raw, ok := obj[path[0]]
	if !ok {
		return false
	}
	if len(path) > 1 {
		var next map[string]json.RawMessage
		return json.Unmarshal(raw, &next) == nil && next != nil && present(next, path[1:])
	}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil {
		return false
	}
	switch compact.String() {
	case "null", `""`, "[]", "{}":
		return false
	}
	return true
}
