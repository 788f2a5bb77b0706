package relay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gormoutbox/outbox"
)

// rescueColumns are what a rescue reads of an expired row: everything an
// envelope needs but the payload, which a rescue does not deliver. The
// payloads of the rows that go dead are read afterwards for OnDead.
const rescueColumns = "id, event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, headers, attempts, max_attempts, claim_version, locked_by, available_at, created_at"

// rescueLimit bounds the rows one rescue handles.
const rescueLimit = 500

// rescue returns events whose lease expired (their relay crashed or
// stalled) to the table: failed with a backoff, or dead when the claim that
// expired was their last attempt. A crash spends an attempt, so an event
// that crashes every relay that delivers it goes dead after its attempts.
//
// An expired claim of this relay whose outcome it knows but could not
// record in time (see lateOutcomes) gets that outcome instead, and one
// whose outcomes are still on their way to the database (a batch not
// completed yet: a completion delayed past the lease) is left alone.
func (r *Relay) rescue(ctx context.Context) (Result, error) {
	dctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
	defer cancel()
	var rows []outbox.OutboxEvent
	b := r.kind.NewBuilder()
	b.Add("SELECT " + rescueColumns + " FROM " + r.table + " WHERE status = 'publishing' AND locked_until <= ")
	b.Now()
	b.Add(fmt.Sprintf(" ORDER BY locked_until LIMIT %d", rescueLimit))
	if err := r.db.WithContext(dctx).Raw(b.SQL(), b.Args()...).Scan(&rows).Error; err != nil {
		return Result{}, fmt.Errorf("relay: finding expired leases: %w", err)
	}
	normaliseTimes(r.kind, rows)
	outs, isLate, lateIDs := r.rescueOutcomes(rows)
	if len(outs) == 0 {
		return Result{}, nil
	}
	applied, settled, err := r.apply(dctx, outs, fenceExpired, false)
	res := r.accountRescue(ctx, outs[:settled], applied[:settled], isLate[:settled])
	if err != nil {
		return res, fmt.Errorf("relay: rescuing expired leases: %w", err)
	}
	// Late outcomes not found among expired claims when the rescue saw them
	// all, although their lease has surely ended, were rescued by another
	// relay meanwhile, or recorded by a statement whose answer was lost.
	keepFor := r.lateTTL()
	if len(rows) < rescueLimit {
		keepFor = 2*r.cfg.lease + 10*time.Second
	}
	if dropped := r.late.forget(lateIDs, keepFor); len(dropped) > 0 {
		res.add(r.settleDropped(ctx, dropped))
	}
	return res, nil
}

// rescueOutcomes returns the outcomes a rescue gives the expired rows:
// the late outcome this relay kept for its own claim, if any (isLate), or
// an expired claim's. Rows of this relay's held batches are left out.
func (r *Relay) rescueOutcomes(rows []outbox.OutboxEvent) (outs []outcome, isLate []bool, lateIDs []int64) {
	var holds func(id, claimVersion int64) bool
	for i := range rows {
		row := &rows[i]
		if deref(row.LockedBy) == r.cfg.workerID {
			if o, ok := r.late.known(row.ID, row.ClaimVersion); ok {
				o.row = row
				outs, isLate = append(outs, o), append(isLate, true)
				lateIDs = append(lateIDs, row.ID)
				continue
			}
			if holds == nil {
				holds = r.held.holds()
			}
			if holds(row.ID, row.ClaimVersion) {
				continue // its completion is under way
			}
		}
		outs, isLate = append(outs, r.expiredOutcome(row)), append(isLate, false)
	}
	return outs, isLate, lateIDs
}

// settleDropped accounts for late outcomes no longer found among expired
// claims: recorded after all (a completion whose answer was lost), or lost.
func (r *Relay) settleDropped(ctx context.Context, outs []outcome) Result {
	pos := make(map[int64]int, len(outs))
	for i := range outs {
		pos[outs[i].row.ID] = i
	}
	applied := make([]bool, len(outs))
	cctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
	defer cancel()
	if err := r.confirm(r.db.WithContext(cctx), outs, pos, applied); err != nil {
		r.log.Warn("checking outcomes this relay could not record failed; counting them lost", "error", err)
	}
	isLate := make([]bool, len(outs))
	for i := range isLate {
		isLate[i] = true
	}
	return r.accountRescue(ctx, outs, applied, isLate)
}

// lateTTL is how long late outcomes are kept.
func (r *Relay) lateTTL() time.Duration { return max(10*r.cfg.lease, 10*time.Minute) }

// expiredOutcome is the outcome of a claim that expired without one.
func (r *Relay) expiredOutcome(row *outbox.OutboxEvent) outcome {
	o := outcome{row: row, expired: true}
	r.retryOrDie(&o, fmt.Errorf("lease expired: relay %q claimed the event (attempt %d) and recorded no outcome; it crashed or stalled while delivering it",
		deref(row.LockedBy), row.Attempts))
	o.env, _ = envelope(row)
	return o
}

// accountRescue counts, logs and reports the outcomes a rescue recorded:
// one line for the rescued claims and one for the late outcomes, each
// event at debug level.
func (r *Relay) accountRescue(ctx context.Context, outs []outcome, applied, isLate []bool) Result {
	var (
		res           Result
		rescued, late rescueSummary
		lostLate      int
		died          int
	)
	r.withPayloads(ctx, outs, applied)
	now := time.Now()
	for i := range outs {
		o := &outs[i]
		switch {
		case !applied[i] && isLate[i]:
			lostLate++
			r.lose(ctx, o, &res)
			continue
		case !applied[i]: // another relay rescued it first
			continue
		case isLate[i]:
			late.add(o)
			r.log.Debug("recorded an outcome after its lease expired", "event_id", o.row.EventID, "event_type", o.row.Type,
				"attempt", o.row.Attempts, "outcome", o.kind.String())
		default:
			rescued.add(o)
			if o.kind == dead {
				died++
			}
			r.log.Debug("rescued an event whose lease expired", "event_id", o.row.EventID, "event_type", o.row.Type,
				"attempt", o.row.Attempts, "locked_by", deref(o.row.LockedBy), "dead", o.kind == dead)
		}
		r.tally(ctx, o, &res, now)
	}
	if rescued.n > 0 {
		r.log.Warn("rescued events whose lease expired (their relay crashed, stalled or gave their delivery up); each spent an attempt",
			"events", rescued.n, "dead", died, "relays", rescued.relayList(), "oldest_event_id", rescued.oldestID,
			"oldest_created_at", rescued.oldest)
	}
	if late.n > 0 {
		r.log.Info("recorded outcomes after their lease expired (the database was out of reach)", "events", late.n,
			"oldest_event_id", late.oldestID)
	}
	if lostLate > 0 {
		r.log.Warn("another relay rescued events before their late outcomes were recorded; they are delivered again", "events", lostLate)
	}
	return res
}

// rescueSummary is what the log line of a rescue says about its events.
type rescueSummary struct {
	n        int
	relays   map[string]int
	oldestID string
	oldest   time.Time
}

func (s *rescueSummary) add(o *outcome) {
	s.n++
	if s.relays == nil {
		s.relays = map[string]int{}
	}
	s.relays[deref(o.row.LockedBy)]++
	if s.oldestID == "" || o.row.CreatedAt.Before(s.oldest) {
		s.oldestID, s.oldest = o.row.EventID, o.row.CreatedAt
	}
}

// relayList names the relays that held the events, with their counts, at
// most ten.
func (s *rescueSummary) relayList() string {
	names := slices.Sorted(maps.Keys(s.relays))
	var b strings.Builder
	for i, name := range names {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%d)", name, s.relays[name])
	}
	return b.String()
}

// withPayloads reads the payloads of the rescued events that went dead,
// for OnDead: a rescue reads no payloads otherwise.
func (r *Relay) withPayloads(ctx context.Context, outs []outcome, applied []bool) {
	if r.cfg.onDead == nil {
		return
	}
	byID := map[int64]*outbox.Envelope{}
	var ids []int64
	for i := range outs {
		if o := &outs[i]; applied[i] && o.kind == dead && o.env != nil && o.env.Payload == nil {
			byID[o.row.ID] = o.env
			ids = append(ids, o.row.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	var rows []struct {
		ID      int64
		Payload []byte
	}
	pctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
	defer cancel()
	if err := r.db.WithContext(pctx).Table(r.table).Select("id, payload").Where("id IN ?", ids).Scan(&rows).Error; err != nil {
		r.log.Warn("reading the payloads of dead events for OnDead failed; it gets them without", "error", err)
		return
	}
	for _, row := range rows {
		byID[row.ID].Payload = row.Payload
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
