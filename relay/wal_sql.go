package relay

// The SQL of WAL mode, which runs on PostgreSQL only (outbox.WAL refuses
// the other dialects): like listen.go, it stays out of internal/sqldriver.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gormoutbox/outbox"
)

// spillRow is a streamed event on its way into the outbox table.
type spillRow struct {
	outbox.OutboxEvent
	headers   map[string]string
	lastError string
}

// spillColumns are the columns a spill writes.
const spillColumns = "event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, " +
	"status, attempts, max_attempts, available_at, last_error, created_at"

// spill inserts rows, in their order (ids follow commit order within a
// key), skipping an event id already in the table (the same transaction
// streamed again after a crash before its position was confirmed), then
// wakes the relays. The commit waits for the disk: the slot confirms past
// these events next.
func (s *walStreamer) spill(ctx context.Context, rows []spillRow) error {
	r := s.r
	for start := 0; start < len(rows); start += 500 {
		part := rows[start:min(start+500, len(rows))]
		var sb strings.Builder
		sb.WriteString("INSERT INTO " + r.table + " (" + spillColumns + ") VALUES ")
		args := make([]any, 0, 16*len(part))
		for i := range part {
			row := &part[i]
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			var headers, lastErr any
			if len(row.headers) > 0 {
				b, err := json.Marshal(row.headers)
				if err != nil {
					return err
				}
				headers = string(b)
			}
			if row.lastError != "" {
				lastErr = row.lastError
			}
			args = append(args, row.EventID, row.Type, max(row.Version, 1), row.TenantID, row.AggregateType, row.AggregateID,
				row.PartitionKey, row.Topic, row.Payload, headers, string(row.Status), row.Attempts, row.MaxAttempts,
				row.AvailableAt.UTC(), lastErr, row.CreatedAt.UTC())
		}
		sb.WriteString(" ON CONFLICT (event_id) DO NOTHING")
		if err := r.db.WithContext(ctx).Exec(sb.String(), args...).Error; err != nil {
			return err
		}
	}
	r.drv.notify(r.db.WithContext(ctx))
	return nil
}

// keyedUnfinishedSQL lists the keys with unfinished rows (the key index).
const keyedUnfinishedSQL = "SELECT DISTINCT partition_key FROM %s WHERE partition_key <> '' AND status IN " + unfinishedIn

// loadBlocked reads the keys that have unfinished rows in the table,
// whose streamed events must wait behind them.
func (s *walStreamer) loadBlocked(ctx context.Context) (map[string]bool, error) {
	var keys []string
	if err := s.r.db.WithContext(ctx).Raw(fmt.Sprintf(keyedUnfinishedSQL, s.r.table)).Scan(&keys).Error; err != nil {
		return nil, fmt.Errorf("reading the keys waiting in %s: %w", s.r.table, err)
	}
	blocked := make(map[string]bool, len(keys))
	for _, k := range keys {
		blocked[k] = true
	}
	return blocked, nil
}

// recheck unblocks the keys of the batch's events whose rows in the table
// are all finished now.
func (d *walDeliverer) recheck(ctx context.Context, events []*walEvent) error {
	var keys []string
	seen := map[string]bool{}
	for i := range events {
		k := events[i].row.PartitionKey
		if !events[i].done && k != "" && d.blocked[k] && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	var still []string
	q := fmt.Sprintf(keyedUnfinishedSQL, d.s.r.table) + " AND partition_key IN ?"
	if err := d.s.r.db.WithContext(ctx).Raw(q, keys).Scan(&still).Error; err != nil {
		return fmt.Errorf("reading the keys waiting in %s: %w", d.s.r.table, err)
	}
	for _, k := range keys {
		delete(d.blocked, k)
	}
	for _, k := range still {
		d.blocked[k] = true
	}
	return nil
}

// slotState is a slot's row of pg_replication_slots, with its lag.
type slotState struct {
	Exists   bool
	Status   string // wal_status: reserved, extended, unreserved, lost
	Active   bool
	LagBytes int64 // from the confirmed position to the end of the WAL
	SafeWAL  *int64
}

// slotStateSQL reads a slot's state.
const slotStateSQL = `SELECT true AS exists, COALESCE(wal_status, '') AS status, active,
	COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint AS lag_bytes, safe_wal_size AS safe_wal
	FROM pg_replication_slots WHERE slot_name = ?`

// checkSlot fails with errSlotLost when the slot was invalidated,
// errSlotMissing when it does not exist, and errSlotActive while another
// connection streams it.
func (s *walStreamer) checkSlot(ctx context.Context) error {
	var st slotState
	if err := s.r.db.WithContext(ctx).Raw(slotStateSQL, s.setup.Slot).Scan(&st).Error; err != nil {
		return fmt.Errorf("reading the slot %s: %w", s.setup.Slot, err)
	}
	switch {
	case !st.Exists:
		return fmt.Errorf("%w: the slot %s does not exist", errSlotMissing, s.setup.Slot)
	case st.Status == "lost":
		return fmt.Errorf("%w: wal_status lost (max_slot_wal_keep_size exceeded)", errSlotLost)
	case st.Active:
		// Standby without opening a replication connection that the
		// server would refuse (and log) every second.
		return fmt.Errorf("%w: the slot %s is active", errSlotActive, s.setup.Slot)
	}
	return nil
}

// walStatusEvery is how often the streaming relay records its progress
// and checks the slot's health.
const walStatusEvery = time.Second

// keepStatus records, while the session streams, the slot's progress in
// the WAL status table and watches its health: an invalidated slot ends
// the session (which stops the relay), a slot near its limit is logged.
func (s *walStreamer) keepStatus(ctx context.Context) {
	t := time.NewTicker(walStatusEvery)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := s.recordStatus(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.r.log.Warn("WAL mode: recording the slot's progress failed", "error", err)
			}
			continue
		}
		if w := s.warning(st); w != "" && time.Since(warned) > time.Minute {
			warned = time.Now()
			s.r.log.Warn("WAL mode: "+w, "slot", s.setup.Slot, "lag_bytes", st.LagBytes, "wal_status", st.Status)
		}
	}
}

// recordStatus writes the streamer's row of the WAL status table and
// reads the slot's state, in one statement committed without a flush.
func (s *walStreamer) recordStatus(ctx context.Context) (slotState, error) {
	var st slotState
	var oldest any
	if t := s.oldest.first(); !t.IsZero() {
		oldest = t.UTC()
	}
	settled := s.settled.Load()
	q := `WITH up AS (INSERT INTO ` + outbox.WALStatusTable(s.r.table) + ` (slot, streamer, confirmed_lsn, oldest_unconfirmed_at, updated_at)
		VALUES (?, ?, ?::text::pg_lsn, ?, now())
		ON CONFLICT (slot) DO UPDATE SET streamer = EXCLUDED.streamer, confirmed_lsn = EXCLUDED.confirmed_lsn,
			oldest_unconfirmed_at = EXCLUDED.oldest_unconfirmed_at, updated_at = EXCLUDED.updated_at
		RETURNING 1)
	SELECT true AS exists, COALESCE(wal_status, '') AS status, active,
		COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint AS lag_bytes, safe_wal_size AS safe_wal
	FROM pg_replication_slots WHERE slot_name = ? AND (SELECT count(*) FROM up) >= 0
		AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`
	err := s.r.db.WithContext(ctx).Raw(q, s.setup.Slot, s.r.cfg.workerID, lsnText(settled), oldest, s.setup.Slot).Scan(&st).Error
	if err == nil {
		s.r.inst.walLag.Store(st.LagBytes)
	}
	return st, err
}

// lsnText is an LSN in PostgreSQL's text form.
func lsnText(lsn uint64) string { return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)) }

// warning describes a slot past the warning thresholds, or "".
func (s *walStreamer) warning(st slotState) string {
	return walWarning(st, s.oldestAge(), s.r.cfg.walWarnLag, s.r.cfg.walWarnAge)
}

// oldestAge is how long the oldest transaction received and not settled
// has been committed (zero: none).
func (s *walStreamer) oldestAge() time.Duration {
	if t := s.oldest.first(); !t.IsZero() {
		return max(time.Since(t), 0)
	}
	return 0
}

// walWarning describes a slot past the thresholds, or "".
func walWarning(st slotState, age time.Duration, lagLimit int64, ageLimit time.Duration) string {
	var w []string
	switch st.Status {
	case "lost":
		return "the slot was invalidated (wal_status lost): events were lost"
	case "unreserved":
		w = append(w, "the slot's WAL is past max_slot_wal_keep_size (wal_status unreserved): it is invalidated at the next checkpoint unless the streamer catches up")
	}
	if lagLimit > 0 && st.LagBytes >= lagLimit {
		w = append(w, fmt.Sprintf("the slot is %d bytes behind (warning at %d)", st.LagBytes, lagLimit))
	}
	if ageLimit > 0 && age >= ageLimit {
		w = append(w, fmt.Sprintf("its oldest unconfirmed commit is %v old (warning at %v)", age.Round(time.Second), ageLimit))
	}
	return strings.Join(w, "; ")
}
