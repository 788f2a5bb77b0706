package relay

import (
	"context"
	"fmt"
	"sort"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// EventQuery selects the events of a ListEvents page or a CountEvents.
type EventQuery struct {
	Filter
	// Status keeps events in this state; empty keeps all.
	Status outbox.Status
	// Newest lists the newest events first (by row id, which is creation
	// order), paging with Filter.BeforeID; otherwise the oldest come
	// first, paging with Filter.AfterID.
	Newest bool
	// Unfinished, with Status empty, keeps the events that are not
	// published: pending, publishing, failed and dead. They are read from
	// the partial indexes that hold them (claim, key, lease and dead
	// indexes), so that a filter by partition key is fast however much
	// published history the key has; published events of a key have no
	// index (one over every row would cost the relay an entry per event
	// and state change) and are found with Status published, which walks
	// the primary key.
	Unfinished bool
}

// unfinishedArms are the conditions of EventQuery.Unfinished, one per
// partial index, each written as its index's predicate.
var unfinishedArms = []string{
	"status IN ('pending', 'failed') AND partition_key = ''",
	"status IN " + unfinishedIn + " AND partition_key <> ''",
	"status = 'publishing' AND partition_key = ''",
	"status = 'dead'",
}

// EventPage is one page of ListEvents.
type EventPage struct {
	// Events are the page's rows without Payload and Headers: a listing
	// never carries payload bytes (GetEvent reads them).
	Events []outbox.OutboxEvent
	// Next is the cursor of the next page (its AfterID, or its BeforeID
	// when listing newest first), zero on the last page.
	Next int64
}

// listColumns are the columns of a listing: every column but the payload
// and the headers.
const listColumns = "id, event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, status, " +
	"attempts, max_attempts, available_at, claim_version, locked_by, locked_until, last_error, published_at, created_at"

// ListEvents returns a page of the events matching q, in row id order.
// Pages are cursor-based (keyset on the primary key, never OFFSET), so a
// page costs the same however deep it is. The filter on event id is an
// index lookup; a status other than published reads that status's
// partial indexes (and so does Unfinished, the partition key's
// unfinished and dead events included); the other filters are checked
// while the primary key is walked (on PostgreSQL the aggregate filter
// too: migration 0006 dropped its index, which an application may
// create again).
func (i *Inspector) ListEvents(ctx context.Context, q EventQuery) (*EventPage, error) {
	if q.Status != "" && !q.Status.Valid() {
		return nil, fmt.Errorf("%w: status %q (want pending, publishing, published, failed or dead)", ErrInvalidOption, q.Status)
	}
	o := i.at(ctx)
	n := q.limit(100)
	f := q.Filter
	order := "id"
	if q.Newest {
		f.AfterID, order = 0, "id DESC"
	} else {
		f.BeforeID = 0
	}
	var rows []outbox.OutboxEvent
	arms := []string{""}
	if q.Unfinished && q.Status == "" {
		arms = unfinishedArmsOf(q.Filter)
	}
	for _, arm := range arms {
		var part []outbox.OutboxEvent
		if err := o.arm(q.Status, f, arm).Select(listColumns).Order(order).Limit(n + 1).Find(&part).Error; err != nil {
			return nil, fmt.Errorf("relay: listing events: %w", err)
		}
		rows = append(rows, part...)
	}
	if len(arms) > 1 {
		sort.Slice(rows, func(a, b int) bool { return (rows[a].ID < rows[b].ID) != q.Newest })
		rows = rows[:min(len(rows), n+1)]
	}
	page := &EventPage{Events: rows}
	if len(rows) > n {
		page.Events = rows[:n]
		page.Next = rows[n-1].ID
	}
	return page, nil
}

// CountEvents counts the events matching q, ignoring its cursor and
// limit: the number a ReplayAll of the same filter would touch, for dead
// events.
func (i *Inspector) CountEvents(ctx context.Context, q EventQuery) (int64, error) {
	if q.Status != "" && !q.Status.Valid() {
		return 0, fmt.Errorf("%w: status %q", ErrInvalidOption, q.Status)
	}
	f := q.Filter
	f.AfterID, f.BeforeID = 0, 0
	arms := []string{""}
	if q.Unfinished && q.Status == "" {
		arms = unfinishedArmsOf(q.Filter)
	}
	var total int64
	for _, arm := range arms {
		var n int64
		if err := i.at(ctx).arm(q.Status, f, arm).Count(&n).Error; err != nil {
			return 0, fmt.Errorf("relay: counting events: %w", err)
		}
		total += n
	}
	return total, nil
}

// unfinishedArmsOf returns the arms of EventQuery.Unfinished that f can
// match: with a partition key, the unkeyed ones cannot.
func unfinishedArmsOf(f Filter) []string {
	if f.PartitionKey == "" {
		return unfinishedArms
	}
	return []string{unfinishedArms[1], unfinishedArms[3]}
}

// arm is where(status, f) and the condition cond, if any.
func (o *ops) arm(status outbox.Status, f Filter, cond string) *gorm.DB {
	q := o.where(status, f)
	if cond != "" {
		q = q.Where(cond)
	}
	return q
}
