package mysql

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// runs reads, for each head, the events of its key that follow it and can
// go with it: in id order, up to the first that is publishing or not due,
// at most ceil(limit/heads)-1 per key. The run's rows are ranked from 2.
// They need no lock: no other claim takes an event behind a head this
// claim holds, and mark checks their status again.
//
// The runs of keys whose unfinished events are all pending (most keys;
// the walk tells them, c.plain) are read together by one range of the key
// index (runsInRange); the others, and any that range did not cover, by a
// statement with a part per key and state (runsOf). They need no lock
// either: an event behind a head this claim holds becomes publishing (and
// then failed) only by a claim of its head, so a key the walk found
// without such events keeps none until this claim ends.
func (c *claim) runs(heads []sqldriver.ClaimedEvent) ([]ranked, error) {
	if len(heads) == 0 {
		return nil, nil
	}
	per := (c.limit+len(heads)-1)/len(heads) - 1
	if per < 1 {
		return nil, nil
	}
	var out []ranked
	for chunk := range slices.Chunk(heads, runsPerStatement) {
		var plain, rest []sqldriver.ClaimedEvent
		for _, h := range chunk {
			if c.plain[h.PartitionKey] {
				plain = append(plain, h)
			} else {
				rest = append(rest, h)
			}
		}
		for _, seg := range ascending(plain) {
			got, uncovered, err := c.runsInRange(seg, per)
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
			rest = append(rest, uncovered...)
		}
		if len(rest) > 0 {
			got, err := c.runsOf(rest, per)
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
	}
	return out, nil
}

// runsPerStatement bounds the heads whose runs one statement reads (12
// bind parameters each; MySQL takes 65,535 per statement).
const runsPerStatement = 1000

// runsOf reads the runs behind heads, at most per events each, with a
// part per head and state. The pending events behind a head are read for
// every key, the failed and the first publishing one only for the keys
// that have such events (not in c.plain): three parts per head made the
// statement the largest cost of a keyed claim (for 125 heads, 375 parts
// took 28-31 ms of a 46-56 ms claim of 1,000 events).
func (c *claim) runsOf(heads []sqldriver.ClaimedEvent, per int) ([]ranked, error) {
	var (
		q    strings.Builder
		args []any
	)
	for i := range heads {
		for j, s := range walkStatuses {
			if s != statusPending && c.plain[heads[i].PartitionKey] {
				continue
			}
			if i > 0 || j > 0 {
				q.WriteString(" UNION ALL ")
			}
			n := per
			if s == statusPublishing {
				n = 1 // the first one ends the run
			}
			q.WriteString("(SELECT " + sqldriver.ClaimColumns + ", status, available_at <= UTC_TIMESTAMP(6) FROM " + c.table +
				" WHERE status = ? AND partition_key = ? AND id > ? ORDER BY id LIMIT ?)")
			args = append(args, s, heads[i].PartitionKey, heads[i].ID, n)
		}
	}
	rows, err := c.tx.Raw(q.String(), args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("reading the runs of partition keys: %w", err)
	}
	defer rows.Close()
	type follower struct {
		e      sqldriver.ClaimedEvent
		status string
		due    bool
	}
	byKey := map[string][]follower{}
	for rows.Next() {
		var f follower
		if f.e, err = sqldriver.ScanEvent(rows, &f.status, &f.due); err != nil {
			return nil, err
		}
		byKey[f.e.PartitionKey] = append(byKey[f.e.PartitionKey], f)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []ranked
	for _, fs := range byKey {
		slices.SortFunc(fs, func(a, b follower) int { return cmp.Compare(a.e.ID, b.e.ID) })
		for i, f := range fs {
			if i == per || f.status == statusPublishing || !f.due {
				break
			}
			out = append(out, ranked{e: f.e, rank: i + 2})
		}
	}
	return out, nil
}

// ranked is a candidate of a claim and its position in its key's run (1
// for a head and for an event without a key).
type ranked struct {
	e    sqldriver.ClaimedEvent
	rank int
}

// pick fills a batch of at most limit from the heads, the runs behind them
// and the events without a key: by position in run, then oldest first, so
// that every key and the events without a key share the batch, and a key's
// events in the batch are a prefix of its run.
func pick(limit int, heads []sqldriver.ClaimedEvent, runs []ranked, unkeyed []sqldriver.ClaimedEvent) []sqldriver.ClaimedEvent {
	all := make([]ranked, 0, len(heads)+len(runs)+len(unkeyed))
	for _, e := range heads {
		all = append(all, ranked{e: e, rank: 1})
	}
	all = append(all, runs...)
	for _, e := range unkeyed {
		all = append(all, ranked{e: e, rank: 1})
	}
	slices.SortFunc(all, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), a.e.AvailableAt.Compare(b.e.AvailableAt), cmp.Compare(a.e.ID, b.e.ID))
	})
	out := make([]sqldriver.ClaimedEvent, 0, min(limit, len(all)))
	for i := range all[:min(limit, len(all))] {
		out = append(out, all[i].e)
	}
	return out
}
