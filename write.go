package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
)

// Limits of one INSERT statement: PostgreSQL accepts at most 65535 bound
// parameters and MySQL a packet of max_allowed_packet bytes.
const (
	maxRowsPerInsert  = 500
	maxBytesPerInsert = 4 << 20
)

// writer writes encoded events through a transaction with as few
// statements as it can: one per partition-key lock set, one per 500 rows.
type writer struct {
	kind       dialect.Kind
	table      string
	insert     string // "INSERT INTO t (columns) VALUES "
	rowBound   string // one row's placeholders, available_at bound
	rowDefault string // one row's placeholders, available_at by the database
	conflict   string
	// countsInserts: the INSERT's affected-row count is the number of rows
	// inserted, duplicates skipped by the conflict clause not counted.
	countsInserts bool
	readLatest    string // suffix of a SELECT that must see the latest committed rows
	lockID        int32  // PostgreSQL advisory-lock class of this table
}

func newWriter(kind dialect.Kind, table string) *writer {
	cols := "event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, max_attempts, available_at"
	row := "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, %s)"
	if kind == dialect.SQLite { // no DEFAULT keyword in VALUES, and no server clock
		cols += ", created_at"
		row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, %s, ?)"
	}
	h := fnv.New32a()
	h.Write([]byte("gorm-outbox:" + table))
	return &writer{
		kind:       kind,
		table:      table,
		insert:     "INSERT INTO " + table + " (" + cols + ") VALUES ",
		rowBound:   fmt.Sprintf(row, "?"),
		rowDefault: fmt.Sprintf(row, "DEFAULT"),
		conflict:   kind.InsertIgnore("event_id"),
		// MySQL's ON DUPLICATE KEY UPDATE reports a duplicate as 0 rows,
		// or as 1 with the clientFoundRows DSN flag.
		countsInserts: kind != dialect.MySQL,
		readLatest:    readLatest(kind),
		lockID:        int32(h.Sum32()),
	}
}

// readLatest makes the duplicate check see the row another transaction
// committed under the same id. InnoDB's REPEATABLE READ would read the
// transaction's snapshot, which may predate it; a shared locking read sees
// the latest committed row (MariaDB has no FOR SHARE). PostgreSQL's READ
// COMMITTED statement sees it already (and under REPEATABLE READ the
// insert itself fails with a serialization error), and SQLite has one
// writer.
func readLatest(kind dialect.Kind) string {
	if kind == dialect.MySQL {
		return " LOCK IN SHARE MODE"
	}
	return ""
}

// write inserts events through db's connection, which must be in a
// transaction. Its statements reach db's GORM logger (when slow or failed)
// without the payloads and headers bound to them.
func (w *writer) write(db *gorm.DB, events []encodedEvent) error {
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
	if inserted < int64(len(events)) || (ownIDs && !w.countsInserts) {
		return w.checkDuplicates(tx, events)
	}
	return nil
}

func (w *writer) insertRows(tx *gorm.DB, events []encodedEvent) (int64, error) {
	var sb strings.Builder
	sb.Grow(len(w.insert) + len(events)*(len(w.rowDefault)+2) + len(w.conflict))
	sb.WriteString(w.insert)
	args := make([]any, 0, len(events)*13)
	now := time.Now()
	for i := range events {
		e := &events[i]
		if i > 0 {
			sb.WriteString(", ")
		}
		args = append(args, e.EventID, e.Type, e.Version, e.TenantID, e.AggregateType,
			e.AggregateID, e.PartitionKey, e.Topic, payloadValue(e.Payload), headersValue(e.Headers), e.MaxAttempts)
		switch {
		case e.AvailableAt != nil:
			sb.WriteString(w.rowBound)
			args = append(args, w.kind.Time(*e.AvailableAt))
		case w.kind == dialect.SQLite:
			sb.WriteString(w.rowBound)
			args = append(args, w.kind.Time(now))
		default:
			sb.WriteString(w.rowDefault)
		}
		if w.kind == dialect.SQLite {
			args = append(args, w.kind.Time(now))
		}
	}
	// Generated ids (UUIDv7) cannot collide: only application-chosen ids,
	// which are dedupe keys, need the conflict clause and its extra check.
	if slices.ContainsFunc(events, func(e encodedEvent) bool { return e.ownID }) {
		sb.WriteString(w.conflict)
	}
	res := tx.Exec(sb.String(), args...)
	if res.Error != nil {
		return 0, fmt.Errorf("outbox: writing %d event(s) to %s: %w", len(events), w.table, res.Error)
	}
	return res.RowsAffected, nil
}

// lockKeys serialises the writers of each partition key until commit, so
// that the ids of one key are assigned in the commit order of their
// transactions. Keys are locked in a fixed order to avoid deadlocks between
// two transactions that write the same keys.
func (w *writer) lockKeys(tx *gorm.DB, events []encodedEvent) error {
	if w.kind == dialect.SQLite { // one writer at a time already
		return nil
	}
	keys := make([]string, 0, 4)
	for i := range events {
		if k := events[i].PartitionKey; k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	var (
		sql  strings.Builder
		args []any
	)
	switch w.kind {
	case dialect.Postgres:
		// A transaction-scoped advisory lock per key hash: no table, and
		// released by COMMIT or ROLLBACK. A hash collision only makes two
		// keys share a lock.
		hashes := make([]int32, len(keys))
		for i, k := range keys {
			h := fnv.New32a()
			h.Write([]byte(k))
			hashes[i] = int32(h.Sum32())
		}
		slices.Sort(hashes)
		hashes = slices.Compact(hashes)
		sql.WriteString("SELECT pg_advisory_xact_lock(l.c, l.k) FROM (VALUES ")
		for i, h := range hashes {
			if i > 0 {
				sql.WriteString(", ")
			}
			sql.WriteString("(?::integer, ?::integer)")
			args = append(args, w.lockID, h)
		}
		sql.WriteString(") AS l(c, k) ORDER BY l.k")
	case dialect.MySQL:
		slices.Sort(keys)
		keys = slices.Compact(keys)
		sql.WriteString("INSERT INTO " + w.table + "_keys (partition_key, locked_at) VALUES ")
		for i, k := range keys {
			if i > 0 {
				sql.WriteString(", ")
			}
			sql.WriteString("(?, UTC_TIMESTAMP(6))")
			args = append(args, k)
		}
		sql.WriteString(" ON DUPLICATE KEY UPDATE locked_at = UTC_TIMESTAMP(6)")
	}
	if err := tx.Exec(sql.String(), args...).Error; err != nil {
		return fmt.Errorf("outbox: locking partition keys: %w", err)
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
	var rows []storedEvent
	err := tx.Raw("SELECT event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, max_attempts FROM "+
		w.table+" WHERE event_id IN ?"+w.readLatest, ids).Scan(&rows).Error
	if err != nil {
		return fmt.Errorf("outbox: reading duplicate events: %w", err)
	}
	stored := make(map[string]*storedEvent, len(rows))
	for i := range rows {
		stored[rows[i].EventID] = &rows[i]
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

// differs names the first field in which e and s differ, or returns "".
// Trace headers are ignored: a retried emit runs in another span.
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
