package workload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// Expect says what a scenario expects besides "every event once".
type Expect struct {
	// Dead are the event ids that must end dead, without an effect.
	Dead []string
	// Explain describes an event lost in the transport.
	Explain func(ids []string) string
	// Ordered checks that each partition key's effects follow the key's
	// commit order (where the relay itself runs the handlers).
	Ordered bool
	// WAL: the events were written in WAL mode: only those that failed
	// are in the outbox table, and a key's commit order is its orders'
	// KeySeq (WriterConfig.KeySeq).
	WAL bool
}

// Report is what Check found.
type Report struct {
	Committed       int // business rows: events whose transaction committed
	Effects         int // effects of work events
	Duplicates      int // events with more than one effect
	Lost            int // committed events without an effect (and not expected dead)
	Unfinished      int // outbox rows pending, failed or publishing
	Dead            int // outbox rows dead
	HalfWritten     int // business rows without their event, or events without their row
	OrderViolations int // effects of a key out of the key's commit order
	MaxAttempts     int // the most attempts any event took
}

func count(t testing.TB, db *gorm.DB, q string, args ...any) int {
	t.Helper()
	var n int64
	if err := db.Raw(q, args...).Scan(&n).Error; err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return int(n)
}

const (
	unfinishedSQL = `SELECT COUNT(*) FROM outbox_events WHERE status IN ('pending', 'failed', 'publishing')`
	missingSQL    = `SELECT COUNT(*) FROM fault_orders o WHERE NOT EXISTS (SELECT 1 FROM fault_effects f WHERE f.event_id = o.event_id)`
)

// Drained reports whether no event is unfinished and every committed event
// but expectDead of them has its effect.
func Drained(db *gorm.DB, expectDead int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var u, m int64
	if db.WithContext(ctx).Raw(unfinishedSQL).Scan(&u).Error != nil || db.WithContext(ctx).Raw(missingSQL).Scan(&m).Error != nil {
		return false
	}
	return u == 0 && int(m) <= expectDead
}

// Unfinished counts the events pending, failed or publishing.
func Unfinished(db *gorm.DB) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var u int64
	err := db.WithContext(ctx).Raw(unfinishedSQL).Scan(&u).Error
	return int(u), err
}

// WaitDrained waits until no event is unfinished and every committed event
// but the expected dead ones has its effect, and returns how long it took.
// It fails t when the backlog has not shrunk for stall (a relay that
// wedged, or events nobody claims), or after 4 × stall in all, with the
// state it saw: a slow machine (CI runs packages side by side) drains
// slowly, which is no failure of a guarantee, while a backlog that stops
// shrinking is.
func WaitDrained(t testing.TB, db *gorm.DB, stall time.Duration, expectDead int) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(4 * stall)
	var unfinished, missing int
	var lastErr error
	best, progressed := -1, start
	nextLog := start.Add(5 * time.Second)
	for time.Now().Before(deadline) && time.Since(progressed) < stall {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var u, m int64
		lastErr = db.WithContext(ctx).Raw(unfinishedSQL).Scan(&u).Error
		if lastErr == nil {
			lastErr = db.WithContext(ctx).Raw(missingSQL).Scan(&m).Error
		}
		cancel()
		if lastErr == nil {
			unfinished, missing = int(u), int(m)
			if unfinished == 0 && missing <= expectDead {
				return time.Since(start)
			}
			if left := unfinished + missing; best < 0 || left < best {
				best, progressed = left, time.Now()
			}
		}
		if time.Now().After(nextLog) {
			t.Logf("draining: %d events unfinished, %d committed events without effect (%v)", unfinished, missing, lastErr)
			nextLog = nextLog.Add(5 * time.Second)
		}
		time.Sleep(250 * time.Millisecond)
	}
	why := fmt.Sprintf("no progress for %v", stall)
	if !time.Now().Before(deadline) {
		why = fmt.Sprintf("still draining after %v", 4*stall)
	}
	t.Errorf("not drained (%s, %v in all): %d events unfinished, %d committed events without effect (%d expected dead); last error %v; statuses %v",
		why, time.Since(start).Round(time.Second), unfinished, missing, expectDead, lastErr, statuses(t, db))
	return time.Since(start)
}

func statuses(t testing.TB, db *gorm.DB) map[string]int {
	var rows []struct {
		Status string
		N      int
	}
	if err := db.Raw("SELECT status, COUNT(*) AS n FROM outbox_events GROUP BY status").Scan(&rows).Error; err != nil {
		return map[string]int{"error: " + err.Error(): 0}
	}
	m := map[string]int{}
	for _, r := range rows {
		m[r.Status] = r.N
	}
	return m
}

// sample returns up to 5 ids of q's first column.
func sample(t testing.TB, db *gorm.DB, q string) string {
	var ids []string
	if err := db.Raw(q).Scan(&ids).Error; err != nil {
		return err.Error()
	}
	if len(ids) > 5 {
		ids = append(ids[:5], "…")
	}
	return strings.Join(ids, ", ")
}

// Check verifies the guarantees once the backlog drained, fails t for each
// broken one, and returns the figures.
func Check(t testing.TB, db *gorm.DB, exp Expect) Report {
	t.Helper()
	var r Report
	r.Committed = count(t, db, `SELECT COUNT(*) FROM fault_orders`)
	r.Effects = count(t, db, `SELECT COUNT(*) FROM fault_effects WHERE kind = 'work'`)
	dupSQL := `SELECT event_id FROM fault_effects WHERE kind = 'work' GROUP BY event_id HAVING COUNT(*) > 1`
	r.Duplicates = count(t, db, `SELECT COUNT(*) FROM (`+dupSQL+`) d`)
	if r.Duplicates > 0 {
		t.Errorf("%d events have more than one effect: %s", r.Duplicates, sample(t, db, dupSQL))
	}
	if n := count(t, db, `SELECT COUNT(*) FROM fault_effects f WHERE kind = 'work' AND NOT EXISTS (SELECT 1 FROM fault_orders o WHERE o.event_id = f.event_id)`); n > 0 {
		t.Errorf("%d effects of events that never committed", n)
	}

	r.Lost = checkLost(t, db, exp)

	r.Unfinished = count(t, db, unfinishedSQL+` AND type = ?`, TypeWork)
	if r.Unfinished > 0 {
		t.Errorf("%d events are still unfinished: %v", r.Unfinished, statuses(t, db))
	}
	r.Dead = checkDead(t, db, exp)

	if exp.WAL {
		if exp.Ordered {
			r.OrderViolations = checkKeySeq(t, db)
		}
		r.MaxAttempts = count(t, db, `SELECT COALESCE(MAX(attempts), 1) FROM outbox_events`)
		return r
	}
	r.HalfWritten = count(t, db, `SELECT COUNT(*) FROM fault_orders o WHERE NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.event_id = o.event_id)`) +
		count(t, db, `SELECT COUNT(*) FROM outbox_events e WHERE e.type = ? AND NOT EXISTS (SELECT 1 FROM fault_orders o WHERE o.event_id = e.event_id)`, TypeWork)
	if r.HalfWritten > 0 {
		t.Errorf("%d business rows and events committed without each other", r.HalfWritten)
	}
	r.MaxAttempts = count(t, db, `SELECT COALESCE(MAX(attempts), 0) FROM outbox_events`)
	if exp.Ordered {
		r.OrderViolations = checkOrder(t, db)
	}
	return r
}

// checkLost fails t for each committed event without an effect that exp
// does not expect dead, and returns their number.
func checkLost(t testing.TB, db *gorm.DB, exp Expect) int {
	t.Helper()
	lostSQL := `SELECT o.event_id FROM fault_orders o WHERE NOT EXISTS (SELECT 1 FROM fault_effects f WHERE f.event_id = o.event_id)`
	var (
		lost []string
		n    int
	)
	if err := db.Raw(lostSQL).Scan(&lost).Error; err != nil {
		t.Fatal(err)
	}
	for _, id := range lost {
		if !slices.Contains(exp.Dead, id) {
			n++
		}
	}
	if n > 0 {
		msg := sample(t, db, lostSQL)
		if exp.Explain != nil {
			msg += exp.Explain(lost[:min(len(lost), 5)])
		}
		t.Errorf("%d committed events have no effect: %s", n, msg)
	}
	return n
}

// checkDead fails t for each dead event exp does not expect and each
// expected one that is not dead, and returns the number of dead events.
func checkDead(t testing.TB, db *gorm.DB, exp Expect) int {
	t.Helper()
	deadSQL := `SELECT event_id FROM outbox_events WHERE status = 'dead'`
	var dead []string
	if err := db.Raw(deadSQL).Scan(&dead).Error; err != nil {
		t.Fatal(err)
	}
	for _, id := range dead {
		if !slices.Contains(exp.Dead, id) {
			var last string
			db.Raw(`SELECT COALESCE(last_error, '') FROM outbox_events WHERE event_id = ?`, id).Scan(&last)
			t.Errorf("event %s is dead: %s", id, last)
		}
	}
	for _, id := range exp.Dead {
		if !slices.Contains(dead, id) {
			t.Errorf("event %s should be dead; it is %v", id, statusOf(db, id))
		}
	}
	return len(dead)
}

func statusOf(db *gorm.DB, id string) string {
	var s string
	if err := db.Raw(`SELECT status FROM outbox_events WHERE event_id = ?`, id).Scan(&s).Error; err != nil {
		return err.Error()
	}
	return s
}

// checkOrder compares, per partition key, the order of the effects (their
// ids: a key's events are handled one after another) with the order of the
// events' outbox ids (commit order).
func checkOrder(t testing.TB, db *gorm.DB) int {
	t.Helper()
	var rows []struct {
		PartitionKey string
		EventID      string
		OutboxID     int64
	}
	err := db.Raw(`SELECT f.partition_key, f.event_id, e.id AS outbox_id FROM fault_effects f
		JOIN outbox_events e ON e.event_id = f.event_id
		WHERE f.kind = 'work' AND f.partition_key <> '' ORDER BY f.id`).Scan(&rows).Error
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	lastID := map[string]string{}
	violations := 0
	for _, r := range rows {
		if prev, ok := last[r.PartitionKey]; ok && r.OutboxID < prev {
			violations++
			if violations <= 5 {
				t.Errorf("key %s: event %s (outbox id %d) took effect after %s (outbox id %d)",
					r.PartitionKey, r.EventID, r.OutboxID, lastID[r.PartitionKey], prev)
			}
		}
		last[r.PartitionKey], lastID[r.PartitionKey] = r.OutboxID, r.EventID
	}
	if violations > 5 {
		t.Errorf("%d effects out of their key's commit order in all", violations)
	}
	return violations
}

// Probe emits probe events, one every 100ms, until each named relay has
// published one (so that none exited or wedged), or fails t after timeout
// and returns the relays that published none.
func Probe(t testing.TB, db *gorm.DB, relays []string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var missing []string
	for time.Now().Before(deadline) {
		err := db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: "probe-" + uuid.NewString(), Type: TypeProbe})
		})
		if err != nil {
			t.Logf("emitting a probe: %v", err)
		}
		var seen []string
		if err := db.Raw(`SELECT DISTINCT relay FROM fault_probes`).Scan(&seen).Error; err != nil {
			t.Logf("reading probes: %v", err)
		}
		missing = missing[:0]
		for _, r := range relays {
			if !slices.Contains(seen, r) {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("relays %v delivered no probe event within %v: they exited or wedged", missing, timeout)
	return missing
}

// Summary is the line a scenario logs for the guarantees matrix.
type Summary struct {
	Scenario, Dialect, Transport string
	Faults                       string
	Relays                       int
	Report                       Report
	Recover, Total               time.Duration
}

// Log writes the summary line (copied into tests/GUARANTEES.md).
func (s Summary) Log(t testing.TB) {
	t.Helper()
	t.Logf("SUMMARY | %s | %s | %s | relays %d | events %d | faults: %s | effects %d | duplicates %d | lost %d | dead %d | max attempts %d | order violations %d | drained %v after the last fault | total %v |",
		s.Scenario, s.Dialect, s.Transport, s.Relays, s.Report.Committed, s.Faults, s.Report.Effects, s.Report.Duplicates,
		s.Report.Lost, s.Report.Dead, s.Report.MaxAttempts, s.Report.OrderViolations, s.Recover.Round(100*time.Millisecond), s.Total.Round(time.Second))
}

// WaitPublished waits until no event is unfinished (whatever became of
// their effects).
func WaitPublished(t testing.TB, db *gorm.DB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var u int64
		if err := db.Raw(unfinishedSQL).Scan(&u).Error; err == nil && u == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("events still unfinished after %v: %v", timeout, statuses(t, db))
}

// checkKeySeq compares, per partition key, the order of the effects with
// the key's commit order, its orders' KeySeq.
func checkKeySeq(t testing.TB, db *gorm.DB) int {
	t.Helper()
	var rows []struct {
		PartitionKey string
		EventID      string
		KeySeq       int64
	}
	err := db.Raw(`SELECT f.partition_key, f.event_id, o.key_seq FROM fault_effects f
		JOIN fault_orders o ON o.event_id = f.event_id
		WHERE f.kind = 'work' AND f.partition_key <> '' ORDER BY f.id`).Scan(&rows).Error
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	violations := 0
	for _, r := range rows {
		if r.KeySeq == 0 {
			t.Fatalf("event %s of key %s has no KeySeq: write with WriterConfig.KeySeq", r.EventID, r.PartitionKey)
		}
		if prev, ok := last[r.PartitionKey]; ok && r.KeySeq < prev {
			violations++
			if violations <= 5 {
				t.Errorf("key %s: event %s (commit %d of its key) took effect after commit %d", r.PartitionKey, r.EventID, r.KeySeq, prev)
			}
		}
		last[r.PartitionKey] = r.KeySeq
	}
	if violations > 5 {
		t.Errorf("%d effects out of their key's commit order in all", violations)
	}
	return violations
}
