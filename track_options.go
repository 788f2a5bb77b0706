package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
)

// TrackOption configures Track. Options are checked by Track, which
// returns an error wrapping ErrInvalidConfig for an invalid one; a typed
// option (TrackPayload[T] and the like) must be typed for the tracked model.
type TrackOption func(*trackSpec) error

// TrackName sets the name of the model's events: their types are
// "<name>.created", "<name>.updated" and "<name>.deleted", their
// AggregateType is name, and their default PartitionKey "<name>:<id>".
func TrackName(name string) TrackOption {
	return func(s *trackSpec) error {
		if strings.TrimSpace(name) == "" {
			return errors.New("TrackName: empty name")
		}
		s.name = name
		return nil
	}
}

// TrackEventType sets the event type of one operation, replacing
// "<name>.<op>".
func TrackEventType(op ChangeOp, eventType string) TrackOption {
	return func(s *trackSpec) error {
		if err := checkOp(op); err != nil {
			return fmt.Errorf("TrackEventType: %w", err)
		}
		if strings.TrimSpace(eventType) == "" {
			return errors.New("TrackEventType: empty event type")
		}
		s.types[op] = eventType
		return nil
	}
}

// TrackOps limits the events to the operations given (all three by default).
func TrackOps(ops ...ChangeOp) TrackOption {
	return func(s *trackSpec) error {
		if len(ops) == 0 {
			return errors.New("TrackOps: no operation")
		}
		s.ops = map[ChangeOp]bool{}
		for _, op := range ops {
			if err := checkOp(op); err != nil {
				return fmt.Errorf("TrackOps: %w", err)
			}
			s.ops[op] = true
		}
		return nil
	}
}

func checkOp(op ChangeOp) error {
	switch op {
	case ChangeCreated, ChangeUpdated, ChangeDeleted:
		return nil
	}
	return fmt.Errorf("unknown operation %q (want ChangeCreated, ChangeUpdated or ChangeDeleted)", op)
}

// TrackVersion sets the Version of the model's events (1 unless set):
// the version their Change payloads are registered at (RegisterTracked),
// and the one upcasters (RegisterUpcaster) start from.
func TrackVersion(version int) TrackOption {
	return func(s *trackSpec) error {
		if version < 1 {
			return fmt.Errorf("TrackVersion: version %d, want 1 or more", version)
		}
		s.version = version
		return nil
	}
}

// TrackTopic sets the Topic of the model's events.
func TrackTopic(topic string) TrackOption {
	return func(s *trackSpec) error { s.topic = topic; return nil }
}

// TrackStrict makes a statement of the model fail with ErrUntrackable,
// rolling back its transaction's events with it, when its affected rows
// cannot be captured one by one (see Track), and makes db.Exec of a
// statement that writes the model's table fail the same way before it runs.
func TrackStrict() TrackOption {
	return func(s *trackSpec) error { s.strict = true; return nil }
}

// TrackOldValues makes an update of a single row by its primary key read
// the row first (SELECT … FOR UPDATE, in its transaction), so that its
// event carries the old values of the changed columns (Change.Old) and the
// row as stored after the write. Bulk updates always do.
func TrackOldValues() TrackOption {
	return func(s *trackSpec) error { s.oldValues = true; return nil }
}

// TrackLogger sets where Track reports, at debug level, writes it cannot
// capture (db.Exec of the model's table); slog.Default() unless set.
func TrackLogger(l *slog.Logger) TrackOption {
	return func(s *trackSpec) error {
		if l == nil {
			return errors.New("TrackLogger: nil logger")
		}
		s.logger = l
		return nil
	}
}

// TrackPayload replaces the Row of the Change payload with fn's result
// (which must marshal to JSON). fn receives the row as written; for a
// delete whose row was not loaded, a model with only its key set.
func TrackPayload[T any](fn func(row *T) any) TrackOption {
	return typed[T]("TrackPayload", fn != nil, func(s *trackSpec) {
		s.payload = func(row any) any { return fn(row.(*T)) }
	})
}

// TrackKey sets the AggregateID of each event from its row, instead of
// the primary key (the default PartitionKey is then "<name>:<key>"). For a
// delete whose row was not loaded, fn receives a model with only its
// primary key set.
func TrackKey[T any](fn func(row *T) string) TrackOption {
	return typed[T]("TrackKey", fn != nil, func(s *trackSpec) {
		s.key = func(row any) string { return fn(row.(*T)) }
	})
}

// TrackPartitionKey sets the PartitionKey of each event from its row
// (default "<name>:<id>"), e.g. to order a customer's orders together.
func TrackPartitionKey[T any](fn func(row *T) string) TrackOption {
	return typed[T]("TrackPartitionKey", fn != nil, func(s *trackSpec) {
		s.partition = func(row any) string { return fn(row.(*T)) }
	})
}

// TrackTenant sets the TenantID of each event from its row.
func TrackTenant[T any](fn func(row *T) string) TrackOption {
	return typed[T]("TrackTenant", fn != nil, func(s *trackSpec) {
		s.tenant = func(row any) string { return fn(row.(*T)) }
	})
}

// TrackFilter writes an event only when fn returns true for the change and
// its row, e.g. an order whose status changed to paid:
//
//	outbox.TrackFilter(func(c *outbox.Change, o *Order) bool {
//		return c.Op == outbox.ChangeUpdated && c.Changed("status") && o.Status == "paid"
//	})
func TrackFilter[T any](fn func(c *Change, row *T) bool) TrackOption {
	return typed[T]("TrackFilter", fn != nil, func(s *trackSpec) {
		s.filter = func(c *Change, row any) bool { return fn(c, row.(*T)) }
	})
}

func typed[T any](name string, ok bool, set func(*trackSpec)) TrackOption {
	return func(s *trackSpec) error {
		if !ok {
			return fmt.Errorf("%s: nil function", name)
		}
		t := reflect.TypeFor[T]()
		if t.Kind() == reflect.Pointer {
			return fmt.Errorf("%s: type the function with the model struct (%s), not a pointer", name, t.Elem())
		}
		s.typed = append(s.typed, t)
		set(s)
		return nil
	}
}
