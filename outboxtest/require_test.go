package outboxtest_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/outboxtest"
)

func TestRequireEmitted(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		o := createOrder(t, db, "ada", 5)
		id := fmt.Sprint(o.ID)

		// Matched on the given fields; the payload as JSON, whatever its
		// key order and number spelling; headers as a subset.
		ft := &fakeT{}
		env := outboxtest.RequireEmitted(ft, db, outbox.Event{
			Type: "order.created", AggregateID: id,
			Payload: json.RawMessage(`{"total": 5.0, "customer": "ada", "id": ` + id + `}`),
			Headers: map[string]string{"source": "test"},
		})
		ft.requirePassed(t)
		if env == nil || env.Type != "order.created" || env.AggregateType != "order" || env.AggregateID != id ||
			env.PartitionKey != "customer:ada" || env.Attempt != 0 || env.Version != 1 || env.ID == "" || env.CreatedAt.IsZero() {
			t.Fatalf("envelope %+v", env)
		}
		var p struct{ Total int }
		if err := env.Unmarshal(&p); err != nil || p.Total != 5 {
			t.Fatalf("payload %s: %v", env.Payload, err)
		}

		// No match: the message says what was wanted, and what was
		// emitted instead with what differs.
		ft = &fakeT{}
		if got := outboxtest.RequireEmitted(ft, db, outbox.Event{Type: "order.created", AggregateID: "999"}); got != nil {
			t.Fatalf("returned %+v on failure", got)
		}
		ft.requireFailed(t, true,
			`outboxtest: RequireEmitted: no event in outbox_events matches type "order.created", aggregate_id "999"`,
			"1 event in outbox_events, oldest first:",
			"order.created "+env.ID+": aggregate order/"+id+", key customer:ada, pending, payload {",
			`differs: aggregate_id is "`+id+`", want "999"`)

		// A payload that differs says where.
		ft = &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{Type: "order.created",
			Payload: map[string]any{"id": o.ID, "customer": "ada", "total": 6}})
		ft.requireFailed(t, true, "differs: payload.total is 5, want 6")

		// A missing header too.
		ft = &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{Headers: map[string]string{"source": "test", "tenant": "x"}})
		ft.requireFailed(t, true, `header "tenant" = "x"`, `differs: header "tenant" is missing, want "x"`)

		// Two matches are ambiguous.
		createOrder(t, db, "bob", 7)
		ft = &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{Type: "order.created"})
		ft.requireFailed(t, true, `2 events in outbox_events match type "order.created"; want exactly one`,
			"2 matching events, oldest first:", "aggregate order/"+id, "key customer:bob")

		// A filter narrows them.
		ft = &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{Type: "order.created"}, outboxtest.PayloadSubset(map[string]any{"customer": "bob"}))
		ft.requirePassed(t)
	})
}

// Inside a transaction that has not committed, the helpers see its events;
// other connections do not.
func TestRequireEmittedInTransaction(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		err := db.Transaction(func(tx *gorm.DB) error {
			o := createOrder(t, tx, "ada", 5)
			ft := &fakeT{}
			outboxtest.RequireEmitted(ft, tx, outbox.Event{Type: "order.created", AggregateID: fmt.Sprint(o.ID)})
			outboxtest.RequireEmittedMany(ft, tx, []outbox.Event{{Type: "order.created"}})
			if n := len(outboxtest.Emitted(ft, tx)); n != 1 {
				t.Errorf("Emitted in the transaction: %d events, want 1", n)
			}
			outboxtest.RequireNotEmitted(ft, db, outbox.Event{}) // another connection: not committed yet
			ft.requirePassed(t)
			return errRollback
		})
		if err != errRollback {
			t.Fatal(err)
		}
		ft := &fakeT{}
		outboxtest.RequireNotEmitted(ft, db, outbox.Event{Type: "order.created"})
		ft.requirePassed(t)
	})
}

var errRollback = fmt.Errorf("roll back")

func TestRequireNotEmitted(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		ft := &fakeT{}
		outboxtest.RequireNotEmitted(ft, db, outbox.Event{})
		ft.requirePassed(t)

		o := createOrder(t, db, "ada", 5)
		ft = &fakeT{}
		outboxtest.RequireNotEmitted(ft, db, outbox.Event{Type: "order.cancelled"})
		outboxtest.RequireNotEmitted(ft, db, outbox.Event{Type: "order.created"}, outboxtest.Status(outbox.StatusDead))
		ft.requirePassed(t)

		ft = &fakeT{}
		outboxtest.RequireNotEmitted(ft, db, outbox.Event{AggregateType: "order"})
		ft.requireFailed(t, true,
			`outboxtest: RequireNotEmitted: 1 event in outbox_events matches aggregate_type "order", want none`,
			"1 matching event, oldest first:", fmt.Sprintf("order.created %s", outboxtest.Emitted(t, db)[0].ID),
			fmt.Sprintf("aggregate order/%d", o.ID))
	})
}

func TestRequireEmittedMany(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		emit(t, db, outbox.Event{Type: "setup.done"})
		p := outboxtest.Mark(t, db)
		emit(t, db,
			outbox.Event{Type: "cart.checked_out", AggregateID: "c1"},
			outbox.Event{Type: "audit.logged"},
			outbox.Event{Type: "order.placed", AggregateID: "o1", Payload: map[string]int{"total": 5}},
		)
		ft := &fakeT{}
		envs := outboxtest.RequireEmittedMany(ft, db, []outbox.Event{
			{Type: "cart.checked_out", AggregateID: "c1"},
			{Type: "order.placed", Payload: map[string]int{"total": 5}},
		})
		ft.requirePassed(t)
		if len(envs) != 2 || envs[0].Type != "cart.checked_out" || envs[1].Type != "order.placed" {
			t.Fatalf("envelopes %+v", envs)
		}

		// Every event since the mark, in order.
		ft = &fakeT{}
		outboxtest.RequireEmittedMany(ft, db, []outbox.Event{{Type: "cart.checked_out"}, {}, {AggregateID: "o1"}}, outboxtest.Since(p))
		ft.requirePassed(t)

		// The wrong order.
		ft = &fakeT{}
		outboxtest.RequireEmittedMany(ft, db, []outbox.Event{{Type: "order.placed"}, {Type: "cart.checked_out"}})
		ft.requireFailed(t, true,
			`the events in outbox_events of types ["order.placed" "cart.checked_out"] do not match the expectation (in order)`,
			"want 2, got 2:",
			`1. want type "order.placed"`, "got  cart.checked_out ", `differs: type is "cart.checked_out", want "order.placed"`,
			`2. want type "cart.checked_out"`)

		// One expected event too many, and a payload that differs.
		ft = &fakeT{}
		outboxtest.RequireEmittedMany(ft, db, []outbox.Event{
			{Type: "cart.checked_out"}, {Type: "order.placed", Payload: map[string]int{"total": 6}}, {Type: "order.placed"},
		})
		ft.requireFailed(t, true, "want 3, got 2:", "differs: payload.total is 5, want 6", `3. want type "order.placed"`, "got nothing")

		// Emitted events not expected, or expected and not emitted.
		ft = &fakeT{}
		outboxtest.RequireEmittedMany(ft, db, []outbox.Event{{AggregateID: "c1"}}, outboxtest.Since(p))
		ft.requireFailed(t, true, "of every type and emitted since the mark", "want 1, got 3:",
			"2. want nothing\n       got  audit.logged ", "3. want nothing\n       got  order.placed ")
		ft = &fakeT{}
		outboxtest.RequireEmittedMany(ft, db, []outbox.Event{{Type: "setup.done"}}, outboxtest.Since(p))
		ft.requireFailed(t, true, `of types ["setup.done"] and emitted since the mark`, "want 1, got 0:", "got nothing")

		// Nothing expected: nothing since the mark.
		ft = &fakeT{}
		outboxtest.RequireEmittedMany(ft, db, nil, outboxtest.Since(outboxtest.Mark(t, db)))
		ft.requirePassed(t)
		outboxtest.RequireEmittedMany(ft, db, nil, outboxtest.Since(p))
		ft.requireFailed(t, true, "of every type and emitted since the mark", "want 0, got 3:", "want nothing")
	})
}

func TestEmittedFilters(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		emit(t, db,
			outbox.Event{ID: "a", Type: "order.created", AggregateType: "order", AggregateID: "1", Payload: map[string]any{"total": 5, "lines": []any{map[string]any{"sku": "x", "qty": 1}}}},
			outbox.Event{ID: "b", Type: "order.paid", AggregateType: "order", AggregateID: "1", TenantID: "t1", Topic: "billing", Version: 2},
			outbox.Event{ID: "c", Type: "order.created", AggregateType: "order", AggregateID: "2", Payload: map[string]any{"total": 50}},
			outbox.Event{ID: "d", Type: "blob.stored", Payload: []byte{0xff, 0x00}},
		)
		ids := func(filters ...outboxtest.Filter) string {
			t.Helper()
			var out []string
			for _, e := range outboxtest.Emitted(t, db, filters...) {
				out = append(out, e.ID)
			}
			return strings.Join(out, ",")
		}
		for _, c := range []struct {
			name    string
			filters []outboxtest.Filter
			want    string
		}{
			{"none", nil, "a,b,c,d"},
			{"type", []outboxtest.Filter{outboxtest.Type("order.created")}, "a,c"},
			{"types", []outboxtest.Filter{outboxtest.Type("order.paid", "blob.stored")}, "b,d"},
			{"aggregate", []outboxtest.Filter{outboxtest.Aggregate("order", "1")}, "a,b"},
			{"status", []outboxtest.Filter{outboxtest.Status(outbox.StatusPending)}, "a,b,c,d"},
			{"no status", []outboxtest.Filter{outboxtest.Status(outbox.StatusPublished, outbox.StatusDead)}, ""},
			{"like", []outboxtest.Filter{outboxtest.Like(outbox.Event{TenantID: "t1", Topic: "billing", Version: 2})}, "b"},
			{"subset", []outboxtest.Filter{outboxtest.PayloadSubset(map[string]any{"lines": []any{map[string]any{"sku": "x"}}})}, "a"},
			{"subset number", []outboxtest.Filter{outboxtest.PayloadSubset(json.RawMessage(`{"total": 5e1}`))}, "c"},
			{"bytes", []outboxtest.Filter{outboxtest.Like(outbox.Event{Payload: []byte{0xff, 0x00}})}, "d"},
			{"where payload", []outboxtest.Filter{outboxtest.PayloadWhere("total over 10", func(p struct{ Total int }) bool { return p.Total > 10 })}, "c"},
			{"where", []outboxtest.Filter{outboxtest.Where("version 2", func(e *outbox.Envelope) bool { return e.Version == 2 })}, "b"},
			{"and", []outboxtest.Filter{outboxtest.Type("order.created"), outboxtest.Aggregate("order", "2")}, "c"},
		} {
			if got := ids(c.filters...); got != c.want {
				t.Errorf("%s: Emitted %q, want %q", c.name, got, c.want)
			}
		}

		// A predicate's name says why an event does not match.
		ft := &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{ID: "a"}, outboxtest.PayloadWhere("total over 10", func(p struct{ Total int }) bool { return p.Total > 10 }))
		ft.requireFailed(t, true, `payload (as struct { Total int }) total over 10`, `differs: payload is not total over 10: {"lines":`)
		ft = &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{ID: "d"}, outboxtest.PayloadSubset(map[string]int{"total": 5}))
		ft.requireFailed(t, true, "payload containing {\"total\":5}", "blob.stored d: pending, payload 2 bytes, not JSON", "differs: payload is 2 bytes, not JSON, want {\"total\":5}")
	})
}

// AvailableAt and MaxAttempts match what was emitted, to the microsecond
// the databases keep.
func TestLikeScheduling(t *testing.T) {
	eachDB(t, "", func(t *testing.T, db *gorm.DB) {
		at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.FixedZone("CEST", 2*3600))
		emit(t, db, outbox.Event{ID: "later", Type: "reminder.due", AvailableAt: at, MaxAttempts: 4})
		ft := &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{AvailableAt: at, MaxAttempts: 4})
		outboxtest.RequireEmitted(ft, db, outbox.Event{AvailableAt: at.UTC().Truncate(time.Microsecond)})
		ft.requirePassed(t)

		ft = &fakeT{}
		outboxtest.RequireEmitted(ft, db, outbox.Event{AvailableAt: at.Add(time.Second), MaxAttempts: 5})
		ft.requireFailed(t, true, "matches max_attempts 5, available_at 2031-05-06T05:08:10.123456Z",
			"differs: max_attempts is 4, want 5; available_at is 2031-05-06T05:08:09.123456Z, want 2031-05-06T05:08:10.123456Z")
	})
}

func TestInvalidFilters(t *testing.T) {
	db := sqliteDB(t)
	for _, c := range []struct {
		filter outboxtest.Filter
		want   string
	}{
		{outboxtest.Type(), "outboxtest: Emitted: outboxtest: Type: no type given"},
		{outboxtest.Status("sent"), `Status: "sent" is not a status`},
		{outboxtest.PayloadSubset(nil), "PayloadSubset: nil"},
		{outboxtest.PayloadSubset([]byte("not json")), "PayloadSubset: is not JSON"},
		{outboxtest.Like(outbox.Event{Payload: make(chan int)}), "Like: Payload: cannot be marshalled to JSON"},
		{outboxtest.Where("x", nil), "Where: nil function"},
		{outboxtest.Aggregate("", ""), "Aggregate: empty aggregate type and id"},
	} {
		ft := &fakeT{}
		if got := outboxtest.Emitted(ft, db, c.filter); got != nil {
			t.Errorf("%s: returned %v", c.want, got)
		}
		ft.requireFailed(t, true, c.want)
	}
}

// Without the outbox table, the helpers fail saying which table they read.
func TestTableMissing(t *testing.T) {
	db := openSQLite(t)
	if err := db.Use(&outbox.Plugin{}); err != nil {
		t.Fatal(err)
	}
	ft := &fakeT{}
	outboxtest.RequireEmitted(ft, db, outbox.Event{Type: "x"})
	ft.requireFailed(t, true, "outboxtest: RequireEmitted: reading outbox_events:", "no such table", "is the outbox migrated")
	ft = &fakeT{}
	outboxtest.Mark(ft, db)
	ft.requireFailed(t, true, "outboxtest: Mark: reading outbox_events:")
}

// Failure messages cut payloads, and list only the newest events.
func TestFailureMessagesStayShort(t *testing.T) {
	db := sqliteDB(t)
	big := strings.Repeat("x", 100_000)
	for i := range 30 {
		emit(t, db, outbox.Event{Type: "doc.saved", AggregateID: fmt.Sprint(i), Payload: map[string]string{"body": big}})
	}
	ft := &fakeT{}
	outboxtest.RequireEmitted(ft, db, outbox.Event{Type: "doc.deleted", Payload: map[string]string{"body": big}})
	msg := ft.requireFailed(t, true, "30 events in outbox_events, oldest first:", "… 10 older not shown",
		`payload {"body":"xxxxx`, "… (100011 bytes)", "aggregate_id 29")
	if strings.Contains(msg, "aggregate_id 9,") {
		t.Errorf("an older event is listed:\n%s", msg)
	}
	if len(msg) > 12_000 {
		t.Errorf("the message is %d bytes long:\n%.2000s", len(msg), msg)
	}
}
