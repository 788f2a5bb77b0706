package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Limits of one INSERT statement: PostgreSQL accepts at most 65535 bound
// parameters and MySQL a packet of max_allowed_packet bytes.
const (
	maxRowsPerInsert  = 500
	maxBytesPerInsert = 4 << 20
)

// writer writes encoded events through a transaction with as few
// statements as it can: one per partition-key lock set, one per 500 rows.
// The SQL is its driver's (sqldriver.Writer).
type writer struct {
	drv   sqldriver.Driver
	table string
	// walPrefix, in WAL mode, is the prefix of the logical decoding
	// messages written instead of rows (wal_write.go); "" in table mode.
	walPrefix string
}

func newWriter(kind dialect.Kind, table string) *writer {
	return &writer{drv: kind.Driver(), table: table}
}

// write inserts events through db's connection, which must be in a
// transaction. Its statements reach db's GORM logger (when slow or failed)
// without the payloads and headers bound to them.
func (w *writer) write(db *gorm.DB, events []encodedEvent) error {
	if w.walPrefix != "" {
		return w.writeWAL(db, events)
	}
	tx := db.Session(&gorm.Session{NewDB: true, Logger: redactingLogger{db.Logger}})
	if err := w.lockKeys(tx, events); err != nil {
		return err
	}
	var (
		inserted int64
		ownIDs   bool
	)
	for start := 0; start < len(events); {
		end, size := start, 0
		for end < len(events) && end-start < maxRowsPerInsert && (end == start || size+len(events[end].Payload) <= maxBytesPerInsert) {
			size += len(events[end].Payload) + len(events[end].Headers)
			ownIDs = ownIDs || events[end].ownID
			end++
		}
		n, err := w.insertRows(tx, events[start:end])
		if err != nil {
			return err
		}
		inserted += n
		start = end
	}
	// Where the affected-row count cannot tell a duplicate from an insert
	// (MySQL with clientFoundRows=true counts a duplicate as one row),
	// application-chosen ids are always compared with the stored rows.
	if inserted < int64(len(events)) || (ownIDs && !w.drv.InsertCountsRows()) {
		return w.checkDuplicates(tx, events)
	}
	return nil
}

func (w *writer) insertRows(tx *gorm.DB, events []encodedEvent) (int64, error) {
	rows := make([]sqldriver.EventRow, len(events))
	for i := range events {
		e := &events[i]
		rows[i] = sqldriver.EventRow{
			EventID: e.EventID, Type: e.Type, Version: e.Version, TenantID: e.TenantID,
			AggregateType: e.AggregateType, AggregateID: e.AggregateID, PartitionKey: e.PartitionKey,
			Topic: e.Topic, Payload: payloadValue(e.Payload), Headers: headersValue(e.Headers),
			MaxAttempts: e.MaxAttempts, AvailableAt: e.AvailableAt,
		}
	}
	n, err := w.drv.InsertEvents(tx, sqldriver.InsertEventsParams{
		Table: w.table,
		Rows:  rows,
		// Generated ids (UUIDv7) cannot collide: only application-chosen
		// ids, which are dedupe keys, need the conflict clause and its
		// extra check.
		SkipDuplicates: slices.ContainsFunc(events, func(e encodedEvent) bool { return e.ownID }),
		Now:            time.Now(),
	})
	if err != nil {
		return 0, w.failed(fmt.Sprintf("writing %d event(s) to %s", len(events), w.table), err)
	}
	return n, nil
}

// failed wraps the error of a write statement; where the driver reads it
// as a missing table, it also wraps ErrNotMigrated and names the fix.
// Only a failed statement's error is read: nothing is checked beforehand.
func (w *writer) failed(what string, err error) error {
	if w.drv.MissingTable(err) {
		return fmt.Errorf("outbox: %s: %w: %w: run outbox.Migrate (or outbox migrate)", what, ErrNotMigrated, err)
	}
	return fmt.Errorf("outbox: %s: %w", what, err)
}

// lockKeys serialises the writers of each partition key until commit, so
// that the ids of one key are assigned in the commit order of their
// transactions.
func (w *writer) lockKeys(tx *gorm.DB, events []encodedEvent) error {
	keys := make([]string, 0, 4)
	for i := range events {
		if k := events[i].PartitionKey; k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if err := w.drv.LockKeys(tx, sqldriver.LockKeysParams{Table: w.table, Keys: keys}); err != nil {
		return w.failed("locking partition keys", err)
	}
	return nil
}

// storedEvent is the part of a row that dedupe compares.
type storedEvent struct {
	EventID       string
	Type          string
	Version       int
	TenantID      string
	AggregateType string
	AggregateID   string
	PartitionKey  string
	Topic         string
	Payload       []byte
	Headers       []byte
	MaxAttempts   int
}

// checkDuplicates runs when some rows may not have been inserted because
// their event_id exists: each event with an application-chosen id (only
// those can collide) must match the stored row, or the write fails with
// ErrDuplicateEvent.
func (w *writer) checkDuplicates(tx *gorm.DB, events []encodedEvent) error {
	ids := make([]string, 0, len(events))
	for i := range events {
		if events[i].ownID {
			ids = append(ids, events[i].EventID)
		}
	}
	if len(ids) == 0 {
		return fmt.Errorf("outbox: %d event(s) with generated ids were not inserted", len(events))
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	stored, err := w.findEvents(tx, ids)
	if err != nil {
		return err
	}
	for i := range events {
		e := &events[i]
		if !e.ownID {
			continue
		}
		s, ok := stored[e.EventID]
		if !ok {
			return fmt.Errorf("outbox: event %q was neither inserted nor found", e.EventID)
		}
		if field := differs(e, s); field != "" {
			return fmt.Errorf("%w: event %q: %s differs from the stored event", ErrDuplicateEvent, e.EventID, field)
		}
	}
	return nil
}

// findEvents reads the stored rows of ids. A first read sees the rows
// this transaction inserted and those committed before its snapshot; only
// the ids it misses (rows another transaction committed since) are read
// again for the latest rows, which on MySQL is a locking read that would
// also lock the gaps between ids. The compared fields are never updated,
// so a row seen in the snapshot is the row the insert ran into, unless it
// was deleted (published, past retention) and written again under its id
// meanwhile: the event is then compared with the earlier row, as if this
// transaction had run just before the deletion.
func (w *writer) findEvents(tx *gorm.DB, ids []string) (map[string]*storedEvent, error) {
	stored := make(map[string]*storedEvent, len(ids))
	for _, latest := range []bool{false, true} {
		var rows []storedEvent
		err := w.drv.FindEvents(tx, sqldriver.FindEventsParams{
			Table:   w.table,
			Columns: "event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, max_attempts",
			IDs:     ids,
			Latest:  latest,
		}, &rows)
		if err != nil {
			return nil, fmt.Errorf("outbox: reading duplicate events: %w", err)
		}
		for i := range rows {
			stored[rows[i].EventID] = &rows[i]
		}
		ids = slices.DeleteFunc(ids, func(id string) bool { return stored[id] != nil })
		if len(ids) == 0 {
			break
		}
	}
	return stored, nil
}

// differs names the first field in which e and s differ, or returns "".
// Trace headers and the request id are ignored: a retried emit runs in
// another span and, maybe, another request.
func differs(e *encodedEvent, s *storedEvent) string {
	switch {
	case e.Type != s.Type:
		return "Type"
	case e.Version != s.Version:
		return "Version"
	case e.TenantID != s.TenantID:
		return "TenantID"
	case e.AggregateType != s.AggregateType:
		return "AggregateType"
	case e.AggregateID != s.AggregateID:
		return "AggregateID"
	case e.PartitionKey != s.PartitionKey:
		return "PartitionKey"
	case e.Topic != s.Topic:
		return "Topic"
	case e.MaxAttempts != s.MaxAttempts:
		return "MaxAttempts"
	case !bytes.Equal(e.Payload, s.Payload):
		return "Payload"
	case !sameHeaders(e.Headers, s.Headers):
		return "Headers"
	}
	return ""
}

func sameHeaders(a, b []byte) bool {
	decode := func(b []byte) (map[string]string, bool) {
		m := map[string]string{}
		if len(b) > 0 && json.Unmarshal(b, &m) != nil {
			return nil, false
		}
		delete(m, "traceparent")
		delete(m, "tracestate")
		delete(m, HeaderRequestID)
		return m, true
	}
	ma, okA := decode(a)
	mb, okB := decode(b)
	return okA && okB && maps.Equal(ma, mb)
}

// payloadValue and headersValue bind a payload and headers with types that
// redactingLogger recognises; SQL NULL when nil.
func payloadValue(b []byte) any {
	if b == nil {
		return nil
	}
	return payloadArg(b)
}

func headersValue(b []byte) any {
	if b == nil {
		return nil
	}
	return headersArg(b)
}
