package relay

import (
	"context"
	"fmt"

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
// page costs the same however deep it is; the filters on event id and on
// aggregate type and id are index lookups, the others are checked while
// the primary key is walked.
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
	if err := o.where(q.Status, f).Select(listColumns).Order(order).Limit(n + 1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("relay: listing events: %w", err)
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
	var n int64
	if err := i.at(ctx).where(q.Status, f).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("relay: counting events: %w", err)
	}
	return n, nil
}
