package outbox

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Registry declares the events an application writes: for each event type
// and version, the Go type of its payload (Register) and the checks its
// payload must pass, and the upcasters that turn a version into the next
// (RegisterUpcaster). Attached to the plugin (Plugin{Registry: r}), it
// checks every event Emit, a Recorder or Track writes, in the caller's
// transaction: a refused event fails the write with an error wrapping
// ErrInvalidEvent and nothing is written. Attached to a relay
// (relay.WithRegistry, or taken from the plugin), it checks every event
// again before it is published, so that an event written under an older
// schema goes dead at once, with the reason, instead of failing its
// handlers again and again.
//
// A registry is strict unless made with Lenient: an event whose type and
// version were not registered is refused. Registering is safe while the
// registry is in use, but is meant for start-up.
type Registry struct {
	strict   bool
	log      *slog.Logger
	required []MetadataField
	err      error // of the options, reported by Register, Plugin.Use and relay.New

	mu        sync.RWMutex
	schemas   map[schemaKey]*eventSchema
	upcasters map[schemaKey]Upcaster // keyed by the version they upcast from
	logged    sync.Map               // event type -> struct{}: lenient mode logged it
}

type schemaKey struct {
	typ     string
	version int
}

// RegistryOption configures NewRegistry.
type RegistryOption func(*Registry)

// Lenient makes the registry accept events whose type or version was not
// registered, logging each such type once (at warning level) instead of
// refusing it. Registered events are checked as in strict mode.
func Lenient() RegistryOption { return func(r *Registry) { r.strict = false } }

// RegistryLogger sets the logger of lenient mode's warnings; nil keeps
// the default, slog.Default().
func RegistryLogger(l *slog.Logger) RegistryOption {
	return func(r *Registry) {
		if l != nil {
			r.log = l
		}
	}
}

// RequireMetadata makes every write refuse an event that lacks one of the
// fields, from the context (WithMetadata) or its own Headers (TenantID for
// MetadataTenant), with an error wrapping ErrInvalidEvent that names the
// field. It applies to every event, registered or not.
func RequireMetadata(fields ...MetadataField) RegistryOption {
	return func(r *Registry) {
		for _, f := range fields {
			if !f.valid() {
				r.err = fmt.Errorf("%w: RequireMetadata: unknown field %q (want MetadataTenant, MetadataActor, MetadataRequestID or MetadataCorrelationID)", ErrInvalidConfig, string(f))
				return
			}
			if !slices.Contains(r.required, f) {
				r.required = append(r.required, f)
			}
		}
	}
}

// NewRegistry returns an empty, strict registry. A bad option is reported
// by Err, Register, db.Use of a Plugin holding the registry and
// relay.WithRegistry.
func NewRegistry(opts ...RegistryOption) *Registry {
	r := &Registry{strict: true, schemas: map[schemaKey]*eventSchema{}, upcasters: map[schemaKey]Upcaster{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Err returns the error of a bad option given to NewRegistry, or nil.
func (r *Registry) Err() error { return r.err }

// Strict reports whether the registry refuses unregistered events.
func (r *Registry) Strict() bool { return r.strict }

// Register declares T as the payload type of eventType at version (1 or
// more). An event of that type and version is then accepted by the write
// path only if its Payload is a T, a non-nil *T, or JSON ([]byte,
// json.RawMessage or any value marshalling to it) that decodes into a T
// with no unknown field and no field of the wrong type (for a struct T,
// not JSON null or no bytes at all: an event without its payload is
// refused), and passes the
// options' checks: required fields (Required, and the fields tagged
// `outbox:"required"`), the tenant field (the field tagged
// `outbox:"tenant"`, or TenantField), which must equal Event.TenantID, and
// Validate. The relay runs the same checks on the stored payload before
// delivering it.
//
// The events Track writes (payload Change) are registered with
// RegisterTracked, which names their types as Track does.
//
// It fails with an error wrapping ErrInvalidConfig for an empty type, a
// version below 1, a type and version registered already, or a bad option.
func Register[T any](r *Registry, eventType string, version int, opts ...RegisterOption) error {
	if err := r.Err(); err != nil {
		return err
	}
	if strings.TrimSpace(eventType) == "" {
		return fmt.Errorf("%w: Register: empty event type", ErrInvalidConfig)
	}
	if version < 1 {
		return fmt.Errorf("%w: Register(%q): version %d, want 1 or more", ErrInvalidConfig, eventType, version)
	}
	s, err := newSchema[T](eventType, version)
	if err != nil {
		return err
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return fmt.Errorf("%w: Register(%q, %d): %v", ErrInvalidConfig, eventType, version, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := schemaKey{eventType, version}
	if old, ok := r.schemas[k]; ok {
		return fmt.Errorf("%w: Register(%q, %d): registered already, as %s", ErrInvalidConfig, eventType, version, old.goType)
	}
	r.schemas[k] = s
	return nil
}

// Upcaster turns the JSON payload of one version of an event type into the
// payload of the next version.
type Upcaster func(payload json.RawMessage) (json.RawMessage, error)

// RegisterUpcaster declares fn as the upcaster of eventType from version
// from to from+1. Before delivery (Upcast, the relay, consumer helpers
// given the registry), an event is upcast one version at a time for as
// long as an upcaster exists from its version, so that a handler written
// for version 3 receives version 1 and 2 events as version 3, with
// Envelope.Version 3. It fails with an error wrapping ErrInvalidConfig for
// an empty type, from below 1, a nil fn, or an upcaster registered
// already from that version.
func RegisterUpcaster(r *Registry, eventType string, from int, fn Upcaster) error {
	switch {
	case r.Err() != nil:
		return r.Err()
	case strings.TrimSpace(eventType) == "":
		return fmt.Errorf("%w: RegisterUpcaster: empty event type", ErrInvalidConfig)
	case from < 1:
		return fmt.Errorf("%w: RegisterUpcaster(%q): version %d, want 1 or more", ErrInvalidConfig, eventType, from)
	case fn == nil:
		return fmt.Errorf("%w: RegisterUpcaster(%q, %d): nil upcaster", ErrInvalidConfig, eventType, from)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := schemaKey{eventType, from}
	if _, ok := r.upcasters[k]; ok {
		return fmt.Errorf("%w: RegisterUpcaster(%q, %d): registered already", ErrInvalidConfig, eventType, from)
	}
	r.upcasters[k] = fn
	return nil
}

// TypeOf returns the payload type registered for eventType at version.
func (r *Registry) TypeOf(eventType string, version int) (reflect.Type, bool) {
	s := r.schema(eventType, version)
	if s == nil {
		return nil, false
	}
	return s.goType, true
}

func (r *Registry) schema(eventType string, version int) *eventSchema {
	if version == 0 {
		version = 1
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.schemas[schemaKey{eventType, version}]
}

// unregistered returns the error of an unregistered type and version in
// strict mode; in lenient mode it logs the type once and returns nil.
func (r *Registry) unregistered(eventType string, version int) error {
	if r.strict {
		return invalid("Type", "%q version %d is not registered", eventType, version)
	}
	if _, seen := r.logged.LoadOrStore(eventType, struct{}{}); !seen {
		log := r.log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("outbox: event type not registered; accepted (lenient registry)", "event_type", eventType, "version", version)
	}
	return nil
}

// checkWrite runs the write path's checks of e, whose payload encodes to
// payload and whose headers, the context's included, are headers.
func (r *Registry) checkWrite(e *Event, payload []byte, headers map[string]string) error {
	if err := requireMetadata(e, headers, r.required); err != nil {
		return err
	}
	v := e.Version
	if v == 0 {
		v = 1
	}
	s := r.schema(e.Type, v)
	if s == nil {
		return r.unregistered(e.Type, v)
	}
	return s.check(e.Payload, payload, e.TenantID)
}

// Upcast applies the registered upcasters to env, from its version up, for
// as long as one exists from its version, and sets env.Payload and
// env.Version to the result. An upcaster's error is returned wrapping
// ErrInvalidEvent, with env unchanged.
func (r *Registry) Upcast(env *Envelope) error {
	v, payload := max(env.Version, 1), json.RawMessage(env.Payload)
	for {
		r.mu.RLock()
		up := r.upcasters[schemaKey{env.Type, v}]
		r.mu.RUnlock()
		if up == nil {
			break
		}
		out, err := up(payload)
		if err != nil {
			return fmt.Errorf("%w: upcasting %s from version %d to %d: %w", ErrInvalidEvent, env.Type, v, v+1, err)
		}
		payload, v = out, v+1
	}
	env.Payload, env.Version = payload, v
	return nil
}

// Check upcasts env (Upcast) and checks it against the registration of its
// type and resulting version, as the write path does: an unregistered type
// or version (in strict mode), a payload that does not decode into the
// registered type, a required field missing, a tenant field that differs
// from env.TenantID or a Validate error fail with an error wrapping
// ErrInvalidEvent that says why. Relays and consumer helpers mark it
// Permanent: the event cannot become valid by being retried.
func (r *Registry) Check(env *Envelope) error {
	if err := r.Upcast(env); err != nil {
		return err
	}
	s := r.schema(env.Type, env.Version)
	if s == nil {
		return r.unregistered(env.Type, env.Version)
	}
	return s.check(nil, env.Payload, env.TenantID)
}
