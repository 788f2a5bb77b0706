package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func headersOf(t *testing.T, row outbox.OutboxEvent) map[string]string {
	t.Helper()
	h := map[string]string{}
	if len(row.Headers) > 0 {
		must(t, json.Unmarshal(row.Headers, &h))
	}
	return h
}

// Metadata in a statement's context lands in the headers of the events it
// writes (Emit from a transaction, a model hook, a Recorder), its tenant
// in TenantID when the event has none; an event's own headers win.
func TestMetadataFromContextInHeaders(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := outbox.WithMetadata(context.Background(), outbox.Metadata{Tenant: "t1", RequestID: "req-1", CorrelationID: "corr-1"})
		ctx = outbox.WithMetadata(ctx, outbox.Metadata{Actor: "alice"}) // adds to the request's metadata
		must(t, db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := outbox.Emit(tx, outbox.Event{Type: "plain"},
				outbox.Event{Type: "own", TenantID: "t9", Headers: map[string]string{outbox.HeaderActor: "bob"}}); err != nil {
				return err
			}
			return tx.Create(&Order{Customer: "c"}).Error // its AfterCreate emits
		}))
		a := &Account{Owner: "o"}
		a.Deposit(1)
		must(t, db.WithContext(ctx).Create(a).Error)
		must(t, db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "no.context"}) }))

		rows := events(t, db)
		if len(rows) != 5 {
			t.Fatalf("%d events, want 5", len(rows))
		}
		want := map[string]string{outbox.HeaderTenant: "t1", outbox.HeaderActor: "alice", outbox.HeaderRequestID: "req-1", outbox.HeaderCorrelationID: "corr-1"}
		for _, row := range rows {
			h := headersOf(t, row)
			switch row.Type {
			case "no.context":
				if len(h) != 0 || row.TenantID != "" {
					t.Errorf("event without metadata has headers %v, tenant %q", h, row.TenantID)
				}
				continue
			case "own":
				if h[outbox.HeaderActor] != "bob" || row.TenantID != "t9" {
					t.Errorf("the event's own actor/tenant lost: %v, %q", h, row.TenantID)
				}
				continue
			}
			for k, v := range want {
				if h[k] != v {
					t.Errorf("%s: header %s = %q, want %q (headers %v)", row.Type, k, h[k], v, h)
				}
			}
			if row.TenantID != "t1" {
				t.Errorf("%s: TenantID %q, want the context's t1", row.Type, row.TenantID)
			}
		}
	})
}

// RequireMetadata refuses a write lacking a required field, naming it;
// the field may come from the context, the event's headers or, for the
// tenant, TenantID.
func TestRequireMetadata(t *testing.T) {
	reg := outbox.NewRegistry(outbox.Lenient(), outbox.RegistryLogger(testenv.Logger(t)), outbox.RequireMetadata(outbox.MetadataActor, outbox.MetadataTenant))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		emit := func(ctx context.Context, e outbox.Event) error {
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, e) })
		}
		bg := context.Background()
		for _, c := range []struct {
			ctx   context.Context
			event outbox.Event
			want  string
		}{
			{bg, outbox.Event{Type: "x"}, "actor"},
			{outbox.WithMetadata(bg, outbox.Metadata{Actor: "a"}), outbox.Event{Type: "x"}, "tenant-id"},
			{outbox.WithMetadata(bg, outbox.Metadata{Tenant: "t"}), outbox.Event{Type: "x", TenantID: "t"}, "actor"},
		} {
			err := emit(c.ctx, c.event)
			if !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), c.want+" is required") {
				t.Errorf("emit without %s: %v, want ErrInvalidEvent naming it", c.want, err)
			}
		}
		if n := countEvents(t, db); n != 0 {
			t.Fatalf("%d events written without required metadata", n)
		}
		must(t, emit(outbox.WithMetadata(bg, outbox.Metadata{Actor: "a", Tenant: "t"}), outbox.Event{Type: "x"}))
		must(t, emit(bg, outbox.Event{Type: "x", TenantID: "t", Headers: map[string]string{outbox.HeaderActor: "svc"}}))
		if n := countEvents(t, db); n != 2 {
			t.Errorf("%d events, want 2", n)
		}
	})
}

// A handler passes an event's metadata on with Envelope.Metadata.
func TestEnvelopeMetadata(t *testing.T) {
	m := outbox.Metadata{Tenant: "t", Actor: "a", RequestID: "r", CorrelationID: "c"}
	e := &outbox.Envelope{Headers: map[string]string{
		outbox.HeaderTenant: "t", outbox.HeaderActor: "a", outbox.HeaderRequestID: "r", outbox.HeaderCorrelationID: "c", "other": "x"}}
	if got := e.Metadata(); got != m {
		t.Errorf("Metadata() = %+v, want %+v", got, m)
	}
	got, ok := outbox.MetadataFrom(outbox.WithMetadata(context.Background(), e.Metadata()))
	if !ok || got != m {
		t.Errorf("MetadataFrom = %+v, %v", got, ok)
	}
	if _, ok := outbox.MetadataFrom(context.Background()); ok {
		t.Error("MetadataFrom of a bare context reports metadata")
	}
}
