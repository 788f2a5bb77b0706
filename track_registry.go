package outbox

import (
	"fmt"
	"sync"

	"gorm.io/gorm/schema"
)

// RegisterTracked registers Change, Track's payload, as the payload type
// of the events Track writes for model with opts: "<name>.created",
// "<name>.updated" and "<name>.deleted" (TrackName, TrackEventType and
// TrackOps change them, as for Track) at the version TrackVersion sets (1
// by default). A strict registry refuses a tracked model's events until
// they are registered; call it at start-up with the options given to
// Track, in every process whose registry checks them (the writers', the
// relays', the consumers'):
//
//	outbox.RegisterTracked(reg, &Order{})
//	outbox.Track(db, &Order{})
//
// The types are checked as any registered type (Change decoded strictly),
// and upcasters (RegisterUpcaster) apply to them. It fails with an error
// wrapping ErrInvalidConfig for a model without a primary key, an invalid
// option, or a type and version registered already (nothing is
// registered then).
func RegisterTracked(r *Registry, model any, opts ...TrackOption) error {
	if err := r.Err(); err != nil {
		return err
	}
	s, err := schema.Parse(model, &sync.Map{}, schema.NamingStrategy{})
	if err != nil {
		return fmt.Errorf("%w: RegisterTracked: %v", ErrInvalidConfig, err)
	}
	spec, err := newTrackSpec("RegisterTracked", s, opts)
	if err != nil {
		return err
	}
	version := max(spec.version, 1)
	var types []string
	for _, op := range trackOps {
		if !spec.ops[op] {
			continue
		}
		if r.schema(spec.types[op], version) != nil {
			return fmt.Errorf("%w: RegisterTracked(%s): %q version %d is registered already", ErrInvalidConfig, s.Name, spec.types[op], version)
		}
		types = append(types, spec.types[op])
	}
	for _, t := range types {
		if err := Register[Change](r, t, version); err != nil {
			return err
		}
	}
	return nil
}

// registerHint is added to the error of a tracked event refused by a
// strict registry that lacks one of the model's types.
func (p *Plugin) registerHint(spec *trackSpec) string {
	r := p.Registry
	if r == nil || !r.strict {
		return ""
	}
	for _, op := range trackOps {
		if spec.ops[op] && r.schema(spec.types[op], max(spec.version, 1)) == nil {
			return " (outbox.RegisterTracked registers a tracked model's event types)"
		}
	}
	return ""
}
