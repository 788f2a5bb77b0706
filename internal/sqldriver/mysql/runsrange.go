package mysql

import (
	"fmt"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// ascending splits heads, in the walk's order, into the stretches whose
// keys ascend: the walk takes the keys after the cursor, then wraps
// around to the first key, so there are one or two.
func ascending(heads []sqldriver.ClaimedEvent) [][]sqldriver.ClaimedEvent {
	var out [][]sqldriver.ClaimedEvent
	start := 0
	for i := 1; i <= len(heads); i++ {
		if i == len(heads) || heads[i].PartitionKey <= heads[i-1].PartitionKey {
			out = append(out, heads[start:i])
			start = i
		}
	}
	return out
}

// runsInRange reads the runs behind heads, whose keys ascend and have no
// failed or publishing event (c.plain), at most per events each:
// one read of the pending events of every key from the first head's to
// the last head's, in key and id order, bounded by a LIMIT. Through one
// range of the key index this costs about half of a part per key (on
// MariaDB, for 125 keys 8 deep: 4-5 ms against 9-14 ms).
//
// The range may also hold keys that are not heads (their head is
// publishing or locked by another claim), and deep keys would fill the
// LIMIT early: a head whose run the read may have cut short (its key is
// the last one read, or was not met) is returned as uncovered, for runsOf
// to read.
func (c *claim) runsInRange(heads []sqldriver.ClaimedEvent, per int) (out []ranked, uncovered []sqldriver.ClaimedEvent, err error) {
	if len(heads) == 0 {
		return nil, nil, nil
	}
	limit := 2 * (per + 1) * len(heads)
	pending, err := c.pendingInRange(heads[0].PartitionKey, heads[len(heads)-1].PartitionKey, limit)
	if err != nil {
		return nil, nil, err
	}
	head := make(map[string]int64, len(heads))
	for _, h := range heads {
		head[h.PartitionKey] = h.ID
	}
	var (
		last    string
		taken   = map[string]int{} // run events taken per head's key
		stopped = map[string]bool{}
		seen    = map[string]bool{}
	)
	for _, p := range pending {
		last = p.e.PartitionKey
		seen[last] = true
		h, ok := head[last]
		if !ok || p.e.ID <= h || stopped[last] || taken[last] == per {
			continue
		}
		if !p.due { // a run ends at its first event that is not due
			stopped[last] = true
			continue
		}
		taken[last]++
		out = append(out, ranked{e: p.e, rank: taken[last] + 1})
	}
	// A key the read did not meet is left to runsOf (its head failed and
	// nothing pending behind it, or the LIMIT came first). When the LIMIT
	// cut the read, the last key's run may be cut too.
	cut := func(k string) bool {
		return !seen[k] || len(pending) == limit && k == last && taken[k] < per && !stopped[k]
	}
	kept := out[:0]
	for _, r := range out {
		if !cut(r.e.PartitionKey) {
			kept = append(kept, r)
		}
	}
	for _, h := range heads {
		if cut(h.PartitionKey) {
			uncovered = append(uncovered, h)
		}
	}
	return kept, uncovered, nil
}

// pendingEvent is a pending event and whether it is due.
type pendingEvent struct {
	e   sqldriver.ClaimedEvent
	due bool
}

// pendingInRange reads the pending events of the keys from lo to hi, in
// key and id order, at most limit.
func (c *claim) pendingInRange(lo, hi string, limit int) ([]pendingEvent, error) {
	rows, err := c.tx.Raw("SELECT "+sqldriver.ClaimColumns+", available_at <= UTC_TIMESTAMP(6) FROM "+c.table+
		" WHERE status = ? AND partition_key >= ? AND partition_key <= ? ORDER BY partition_key, id LIMIT ?",
		statusPending, lo, hi, limit).Rows()
	if err != nil {
		return nil, fmt.Errorf("reading the runs of partition keys: %w", err)
	}
	defer rows.Close()
	var out []pendingEvent
	for rows.Next() {
		var p pendingEvent
		if p.e, err = sqldriver.ScanEvent(rows, &p.due); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
