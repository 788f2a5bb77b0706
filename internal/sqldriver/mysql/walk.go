package mysql

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// heads walks the keys from after from to the last key, then from the
// first key up to from, and returns the claimable heads it locked, at most
// c.maxHeads, in the walk's order (keys ascending after from, then
// ascending from the first key: runs reads each stretch as one range).
func (c *claim) heads(from string) ([]sqldriver.ClaimedEvent, error) {
	var out []sqldriver.ClaimedEvent
	type segment struct {
		lo string  // exclusive
		hi *string // inclusive; nil: no bound
	}
	segments := []segment{{lo: from}}
	if from != "" {
		segments = append(segments, segment{lo: "", hi: &from})
	}
	for _, s := range segments {
		lo := s.lo
		for len(out) < c.maxHeads {
			ids, end, more, err := c.walk(lo, s.hi)
			if err != nil {
				return nil, err
			}
			for len(ids) > 0 && len(out) < c.maxHeads {
				n := min(len(ids), c.maxHeads-len(out))
				got, err := c.lockHeads(ids[:n])
				if err != nil {
					return nil, err
				}
				// In key order again: the locking read returns them by id.
				slices.SortFunc(got, func(a, b sqldriver.ClaimedEvent) int { return strings.Compare(a.PartitionKey, b.PartitionKey) })
				out = append(out, got...)
				ids = ids[n:]
			}
			if !more {
				break
			}
			lo = end
		}
	}
	return out, nil
}

// walkStatuses are the states of an unfinished event, in the order of the
// parts of the walk's statement.
var walkStatuses = []string{statusPending, statusFailed, statusPublishing}

// walk reads the first pending, failed and publishing event of the keys
// after lo (and up to hi), at most c.maxHeads keys per state, and returns the
// ids of the heads that are pending or failed, in key order. When a state
// had more keys than that, it returns more and the last key covered for
// every state (end); the next walk starts after end. The keys it returns
// heads of that have no failed or publishing event go into c.plain.
//
// Each part is a loose index scan over (status, partition_key, id). The
// status is matched by IN with a second, impossible value on purpose: with
// a plain equality MariaDB reads the range row by row instead of jumping
// from key to key.
func (c *claim) walk(lo string, hi *string) (heads []int64, end string, more bool, err error) {
	firsts, err := c.firsts(lo, hi)
	if err != nil {
		return nil, "", false, err
	}
	type first struct {
		id     int64
		status string
	}
	byKey := map[string]first{}
	other := map[string]bool{} // keys with a failed or publishing event
	last := map[string]string{}
	count := map[string]int{}
	for _, f := range firsts {
		count[f.status]++
		last[f.status] = max(last[f.status], f.key)
		if f.status != statusPending {
			other[f.key] = true
		}
		if b, ok := byKey[f.key]; !ok || f.id < b.id {
			byKey[f.key] = first{f.id, f.status}
		}
	}
	for _, s := range walkStatuses {
		if count[s] == c.maxHeads && (!more || last[s] < end) {
			end, more = last[s], true
		}
	}
	keys := make([]string, 0, len(byKey))
	for k, f := range byKey {
		if f.status != statusPublishing && (!more || k <= end) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if c.plain == nil {
		c.plain = map[string]bool{}
	}
	for _, k := range keys {
		heads = append(heads, byKey[k].id)
		if !other[k] {
			c.plain[k] = true
		}
	}
	return heads, end, more, nil
}

// keyFirst is a key's first event in one state, as the walk reads it.
type keyFirst struct {
	status, key string
	id          int64
}

// firsts runs the walk's statement: per state, the first event of each of
// the first c.maxHeads keys after lo (and up to hi).
func (c *claim) firsts(lo string, hi *string) ([]keyFirst, error) {
	var (
		q    strings.Builder
		args []any
	)
	for i, s := range walkStatuses {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString("(SELECT status, partition_key, MIN(id) FROM " + c.table + " WHERE status IN (?, '') AND partition_key > ?")
		args = append(args, s, lo)
		if hi != nil {
			q.WriteString(" AND partition_key <= ?")
			args = append(args, *hi)
		}
		q.WriteString(" GROUP BY status, partition_key ORDER BY status, partition_key LIMIT ?)")
		args = append(args, c.maxHeads)
	}
	rows, err := c.tx.Raw(q.String(), args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("walking the partition keys: %w", err)
	}
	defer rows.Close()
	var out []keyFirst
	for rows.Next() {
		var f keyFirst
		if err := rows.Scan(&f.status, &f.key, &f.id); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// lockHeads locks those of the heads ids that are still claimable and not
// locked by another claim, and reads them.
func (c *claim) lockHeads(ids []int64) ([]sqldriver.ClaimedEvent, error) {
	rows, err := c.tx.Raw(`SELECT `+sqldriver.ClaimColumns+` FROM `+c.table+` FORCE INDEX (PRIMARY)
		WHERE id IN ? AND status IN ('pending', 'failed') AND available_at <= UTC_TIMESTAMP(6)
		FOR UPDATE SKIP LOCKED`, ids).Rows()
	if err != nil {
		return nil, fmt.Errorf("locking the heads of partition keys: %w", err)
	}
	return sqldriver.ScanClaimed(rows)
}
