package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/gormoutbox/outbox"
)

// Attempt is one record of the attempt log (WithAttemptLog): how one
// claim of an event ended.
type Attempt struct {
	// ID is the record's id, in the order records were written.
	ID int64
	// EventRowID and EventID are the event's row id and event id.
	EventRowID int64
	EventID    string
	// RelayID is the worker id of the relay that recorded the outcome.
	RelayID string
	// Attempt is the event's attempts count of the claim (from 1); an
	// outcome that spends no attempt (snoozed, unavailable, released)
	// leaves the next claim the same number.
	Attempt int
	// ClaimVersion is the claim's fencing token: one record per claim.
	ClaimVersion int64
	// Outcome is one of AttemptPublished, AttemptRetried, AttemptDead,
	// AttemptSnoozed, AttemptUnavailable, AttemptReleased, AttemptRescued.
	Outcome string
	// Duration is how long the delivery ran (zero when none ran: a
	// release before delivery, a rescue, an undecodable event).
	Duration time.Duration
	// Error is the delivery's error text, empty for none.
	Error string
	// Receipt is where the publisher delivered the event, as it reported
	// it with SetReceipt (such as a Kafka topic, partition and offset):
	// set on published records of publishers that report one, empty
	// otherwise.
	Receipt string
	// CreatedAt is when the outcome was recorded.
	CreatedAt time.Time
}

// Attempts returns the attempt log of the event with event id eventID,
// oldest first: empty when the event has none (the log is off, or the
// event was never claimed). It fails with an error wrapping
// ErrEventNotFound when there is no such event, and one wrapping
// outbox.ErrNotMigrated when the attempt log table does not exist
// (migration 0007).
func (i *Inspector) Attempts(ctx context.Context, eventID string) ([]Attempt, error) {
	o := i.at(ctx)
	table := i.attempts.existing(o.db)
	if table == "" {
		return nil, fmt.Errorf("relay: %w: missing table %s: run outbox.Migrate (or `outbox migrate`)", outbox.ErrNotMigrated, i.attempts.name)
	}
	var ids []int64
	if err := o.tbl().Where("event_id = ?", eventID).Limit(1).Pluck("id", &ids).Error; err != nil {
		return nil, fmt.Errorf("relay: reading event %q: %w", eventID, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: %q in %s", ErrEventNotFound, eventID, o.table)
	}
	var rows []struct {
		ID, EventRowID           int64
		EventID, RelayID         string
		Attempt                  int
		ClaimVersion, DurationUs int64
		Outcome                  string
		Error, Receipt           *string
		CreatedAt                time.Time
	}
	err := o.db.Table(gormTable(o.kind, table)).Select("id, event_row_id, event_id, relay_id, attempt, claim_version, outcome, duration_us, error, receipt, created_at").
		Where("event_row_id = ?", ids[0]).Order("claim_version, id").Scan(&rows).Error
	if err != nil {
		if cerr := checkReceiptColumn(o.db, table); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("relay: reading the attempts of event %q: %w", eventID, err)
	}
	out := make([]Attempt, len(rows))
	for n, r := range rows {
		out[n] = Attempt{ID: r.ID, EventRowID: r.EventRowID, EventID: r.EventID, RelayID: r.RelayID, Attempt: r.Attempt,
			ClaimVersion: r.ClaimVersion, Outcome: r.Outcome, Duration: time.Duration(r.DurationUs) * time.Microsecond,
			Error: deref(r.Error), Receipt: deref(r.Receipt), CreatedAt: i.kind.StoredTime(r.CreatedAt)}
	}
	return out, nil
}
