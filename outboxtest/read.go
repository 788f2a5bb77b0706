package outboxtest

import (
	"context"
	"encoding/json"
	"fmt"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// row is one outbox row as the helpers see it: the columns, and the
// envelope a handler would receive.
type row struct {
	outbox.OutboxEvent
	env       *outbox.Envelope
	headerErr error // the headers column is not a JSON object of strings
}

// readColumns are the columns the assertions read.
const readColumns = "id, event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, " +
	"payload, headers, status, attempts, max_attempts, available_at, last_error, published_at, created_at"

// tableOf returns the outbox table of the Plugin installed on db
// (outbox.DefaultTableName without one). The helpers' SQL names it
// unquoted, as the outbox's own statements do, so that it is the same
// table on every database (PostgreSQL folds an unquoted name to lower
// case).
func tableOf(db *gorm.DB) string {
	if p, err := outbox.Lookup(db); err == nil {
		return p.Table()
	}
	return outbox.DefaultTableName
}

// session returns a fresh statement on db's connection: db's own
// transaction when db is one (so that it sees its uncommitted rows), with
// db's context.
func session(db *gorm.DB) *gorm.DB {
	return db.Session(&gorm.Session{NewDB: true})
}

// contextOf returns db's context (set with db.WithContext).
func contextOf(db *gorm.DB) context.Context {
	if db.Statement != nil && db.Statement.Context != nil {
		return db.Statement.Context
	}
	return context.Background()
}

// readAll returns every row of the outbox table, oldest first.
func readAll(db *gorm.DB) ([]*row, error) {
	table := tableOf(db)
	var rows []outbox.OutboxEvent
	err := session(db).Raw("SELECT " + readColumns + " FROM " + table + " ORDER BY id").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w (is the outbox migrated, and the transaction still usable?)", table, err)
	}
	out := make([]*row, len(rows))
	for i := range rows {
		r := &row{OutboxEvent: rows[i]}
		r.env, r.headerErr = envelopeOf(&r.OutboxEvent)
		out[i] = r
	}
	return out, nil
}

// envelopeOf builds the envelope a handler receives for an outbox row (as
// the relay does), with Attempt the attempts made so far. Headers that do
// not decode are left out and reported.
func envelopeOf(e *outbox.OutboxEvent) (*outbox.Envelope, error) {
	env := &outbox.Envelope{
		ID:            e.EventID,
		Type:          e.Type,
		AggregateType: e.AggregateType,
		AggregateID:   e.AggregateID,
		PartitionKey:  e.PartitionKey,
		TenantID:      e.TenantID,
		Topic:         e.Topic,
		Version:       e.Version,
		Attempt:       e.Attempts,
		Payload:       e.Payload,
		CreatedAt:     e.CreatedAt,
	}
	if len(e.Headers) > 0 {
		if err := json.Unmarshal(e.Headers, &env.Headers); err != nil {
			env.Headers = nil
			return env, fmt.Errorf("headers are not a JSON object of strings: %w", err)
		}
	}
	return env, nil
}

// Position is a place in the outbox: the newest event when Mark took it.
// Since(p) keeps the events emitted after it. The zero Position is the
// start of the table.
type Position struct{ id int64 }

// Mark returns the current end of db's outbox, so that the assertions can
// look only at what a unit of work emits after it (Since):
//
//	p := outboxtest.Mark(t, db)
//	placeOrder(db) // the unit of work under test
//	outboxtest.RequireEmittedMany(t, db, want, outboxtest.Since(p))
//
// Events are positioned by their row id, which grows with every insert.
// It fails the test when the table cannot be read.
func Mark(t TB, db *gorm.DB) Position {
	t.Helper()
	if db == nil {
		fatal(t, "outboxtest: Mark: db is nil")
		return Position{}
	}
	if walMode(t, "Mark", db) {
		return Position{}
	}
	table := tableOf(db)
	var id int64
	if err := session(db).Raw("SELECT COALESCE(MAX(id), 0) FROM " + table).Scan(&id).Error; err != nil {
		fatal(t, "outboxtest: Mark: reading %s: %v", table, err)
		return Position{}
	}
	return Position{id: id}
}
