package outbox

import (
	"context"
	"maps"
)

// Metadata is what a request knows about who asked for a change: its
// tenant, its actor and its request and correlation ids. Attached to a
// context with WithMetadata, it is copied into the headers of every event
// written by a statement that runs with that context (db.WithContext(ctx),
// the tx of db.WithContext(ctx).Transaction, or the tx a model hook
// receives from such a statement): Emit, Recorder and Track alike.
type Metadata struct {
	// Tenant goes to the header HeaderTenant and, when the event's TenantID
	// is empty, to TenantID.
	Tenant string
	// Actor (a user or service id) goes to the header HeaderActor.
	Actor string
	// RequestID goes to the header HeaderRequestID. It is not compared when
	// an event ID is emitted again: a retried request has a new one.
	RequestID string
	// CorrelationID goes to the header HeaderCorrelationID.
	CorrelationID string
}

// The headers Metadata is written to. An event's own Headers win over the
// context's values.
const (
	HeaderTenant        = "tenant-id"
	HeaderActor         = "actor"
	HeaderRequestID     = "request-id"
	HeaderCorrelationID = "correlation-id"
)

// MetadataField names one field of Metadata, for RequireMetadata.
type MetadataField string

// The fields of Metadata, named by their headers.
const (
	MetadataTenant        MetadataField = HeaderTenant
	MetadataActor         MetadataField = HeaderActor
	MetadataRequestID     MetadataField = HeaderRequestID
	MetadataCorrelationID MetadataField = HeaderCorrelationID
)

func (f MetadataField) valid() bool {
	switch f {
	case MetadataTenant, MetadataActor, MetadataRequestID, MetadataCorrelationID:
		return true
	}
	return false
}

type metadataKey struct{}

// WithMetadata returns a copy of ctx carrying m. Fields left empty are
// taken from the Metadata ctx already carries, so that a middleware can
// set the request id and a handler the actor.
func WithMetadata(ctx context.Context, m Metadata) context.Context {
	if prev, ok := MetadataFrom(ctx); ok {
		m = prev.merge(m)
	}
	return context.WithValue(ctx, metadataKey{}, m)
}

// MetadataFrom returns the Metadata WithMetadata attached to ctx.
func MetadataFrom(ctx context.Context) (Metadata, bool) {
	if ctx == nil {
		return Metadata{}, false
	}
	m, ok := ctx.Value(metadataKey{}).(Metadata)
	return m, ok
}

// merge returns m overridden by the non-empty fields of n.
func (m Metadata) merge(n Metadata) Metadata {
	for _, f := range [...]struct {
		dst *string
		src string
	}{
		{&m.Tenant, n.Tenant}, {&m.Actor, n.Actor}, {&m.RequestID, n.RequestID}, {&m.CorrelationID, n.CorrelationID},
	} {
		if f.src != "" {
			*f.dst = f.src
		}
	}
	return m
}

// headers adds m's non-empty fields to h (allocated when nil) and returns it.
func (m Metadata) headers(h map[string]string) map[string]string {
	for k, v := range map[string]string{
		HeaderTenant: m.Tenant, HeaderActor: m.Actor, HeaderRequestID: m.RequestID, HeaderCorrelationID: m.CorrelationID,
	} {
		if v == "" {
			continue
		}
		if h == nil {
			h = make(map[string]string, 4)
		}
		h[k] = v
	}
	return h
}

// writeContext is what encoding an event takes from the statement: the
// headers its context adds (trace context, metadata), the tenant of its
// metadata, the payload limit and the registry.
type writeContext struct {
	headers    map[string]string
	tenant     string
	maxPayload int
	reg        *Registry
}

// writeContextOf returns the writeContext of a statement run with ctx. It
// allocates nothing when ctx carries neither a span nor metadata.
func (p *Plugin) writeContextOf(ctx context.Context) writeContext {
	c := writeContext{headers: traceHeaders(ctx), maxPayload: p.maxPayload, reg: p.Registry}
	if m, ok := MetadataFrom(ctx); ok {
		c.headers = m.headers(c.headers)
		c.tenant = m.Tenant
	}
	return c
}

// headersOf returns e's headers with the context's added (e's own
// win), for the registry's checks before encoding.
func (c *writeContext) headersOf(e *Event) map[string]string {
	if len(c.headers) == 0 {
		return e.Headers
	}
	all := maps.Clone(c.headers)
	maps.Copy(all, e.Headers)
	return all
}

// requireMetadata checks that the event carries each required field.
func requireMetadata(e *Event, headers map[string]string, fields []MetadataField) error {
	for _, f := range fields {
		if headers[string(f)] != "" || (f == MetadataTenant && e.TenantID != "") {
			continue
		}
		return invalid("Headers", "%s is required by the registry (outbox.WithMetadata or the header %q); event %s", f, string(f), e.Type)
	}
	return nil
}

// Metadata returns the metadata carried in e's headers (see WithMetadata),
// so that a handler can pass it on to the events it emits:
//
//	ctx = outbox.WithMetadata(ctx, e.Metadata())
func (e *Envelope) Metadata() Metadata {
	return Metadata{
		Tenant:        e.Headers[HeaderTenant],
		Actor:         e.Headers[HeaderActor],
		RequestID:     e.Headers[HeaderRequestID],
		CorrelationID: e.Headers[HeaderCorrelationID],
	}
}
