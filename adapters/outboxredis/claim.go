package outboxredis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/consume"
)

// pendingRef is a pending entry of this consumer found due.
type pendingRef struct {
	id         string
	deliveries int64 // Redis's count, when listed (0: not known until claimed)
}

// claimRound returns this consumer's pending entries that are due: those
// it handed back (Retry) whose delay has passed and, every claim interval,
// the entries it adopts from consumers presumed dead (XAUTOCLAIM … JUSTID,
// which counts no delivery; due at once) and those pending under its name
// that it does not know of (left by an earlier run, or read by a command
// whose reply was lost), due once idle for the retry delay. Nothing is
// claimed here: Begin claims each (XCLAIM) when its handler is about to
// run, so that a delivery counts only then.
func (t *transport) claimRound(ctx context.Context, now time.Time) ([]consume.Message, error) {
	var listed []redis.XPendingExt
	if t.more || !now.Before(t.nextClaim) {
		t.nextClaim = now.Add(t.cfg.claimInterval)
		full, err := t.adopt(ctx, now)
		if err != nil {
			return nil, err
		}
		if listed, err = t.listOwn(ctx); err != nil {
			return nil, err
		}
		t.more = full || t.listFrom != "-"
	}
	due := t.dueEntries(now, listed)
	if len(due) == 0 {
		return nil, nil
	}
	return t.fetch(ctx, due)
}

// adopt makes this consumer the owner of the group's messages idle for the
// min idle time (a consumer that died, or a restart under another name),
// without counting a delivery (JUSTID), due here at once. It reports
// whether the claim came back full.
func (t *transport) adopt(ctx context.Context, now time.Time) (full bool, err error) {
	got, next, err := t.rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{
		Stream: t.stream, Group: t.group, Consumer: t.name, MinIdle: t.cfg.minIdle, Start: t.cursor, Count: t.cfg.count,
	}).Result()
	if err != nil {
		return false, fmt.Errorf("outboxredis: XAUTOCLAIM %s: %w", t.stream, err)
	}
	t.cursor = next
	for _, id := range got {
		t.keep.hold(now, id)
		t.setDue(id, now, false)
	}
	if len(got) > 0 {
		t.log.Info("outboxredis: adopted messages idle too long; handling them here", "messages", len(got), "min_idle", t.cfg.minIdle)
	}
	return int64(len(got)) == t.cfg.count, nil
}

// listOwn lists up to WithCount of this consumer's pending entries idle for
// the retry delay, from where its last listing ended: over a few looks it
// sees them all, however many it holds. Those it knows of (held, their
// idle time reset by the keeper, or due at a time of their own) are left
// to their due time; the others were left by an earlier run or read by a
// command whose reply was lost.
func (t *transport) listOwn(ctx context.Context) ([]redis.XPendingExt, error) {
	p, err := t.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: t.stream, Group: t.group, Consumer: t.name, Idle: t.retryDelay, Start: t.listFrom, End: "+", Count: t.cfg.count,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("outboxredis: XPENDING %s: %w", t.stream, err)
	}
	t.listFrom = "-"
	if int64(len(p)) == t.cfg.count {
		t.listFrom = "(" + p[len(p)-1].ID
	}
	return p, nil
}

// dueEntries returns the first WithCount entries, in entry order, that
// are due: known ones whose due time has passed (in key order, those
// handed back without a delay at the next poll, see setDue), and listed
// ones it does not know of (held from here on). The lowest ids first, not
// those due the longest: in key order the group's lowest pending entry is
// a key's head, which can always run, so each consumer taking its lowest
// ones first keeps every key moving.
func (t *transport) dueEntries(now time.Time, listed []redis.XPendingExt) []pendingRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []pendingRef
	for _, p := range listed {
		if _, known := t.due[p.ID]; !known {
			t.keep.hold(now.Add(-p.Idle), p.ID)
			due = append(due, pendingRef{id: p.ID, deliveries: p.RetryCount})
		}
	}
	poll := !now.Before(t.nextPoll)
	for id, at := range t.due {
		if at.IsZero() && poll || !at.IsZero() && !at.After(now) {
			due = append(due, pendingRef{id: id})
		}
	}
	if poll {
		t.nextPoll = now.Add(t.orderPoll())
	}
	slices.SortFunc(due, func(a, b pendingRef) int { return compareIDs(a.id, b.id) })
	return due[:min(int64(len(due)), t.cfg.count)]
}

// fetch reads the fields of the due entries (XRANGE, which counts no
// delivery). An entry deleted or trimmed while pending is acknowledged:
// there is nothing left to handle.
func (t *transport) fetch(ctx context.Context, due []pendingRef) ([]consume.Message, error) {
	pipe := t.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(due))
	for i, p := range due {
		cmds[i] = pipe.XRange(ctx, t.stream, p.id, p.id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("outboxredis: XRANGE %s: %w", t.stream, err)
	}
	msgs := make([]consume.Message, 0, len(due))
	var gone []string
	for i, p := range due {
		if got := cmds[i].Val(); len(got) == 1 {
			msgs = append(msgs, &message{t: t, id: p.id, values: got[0].Values, pending: true, deliveries: p.deliveries})
			continue
		}
		gone = append(gone, p.id)
		t.forget(p.id)
	}
	if len(gone) > 0 {
		p := t.rdb.Pipeline()
		p.XAck(ctx, t.stream, t.group, gone...)
		p.HDel(ctx, t.excusedKey, gone...)
		_, err := p.Exec(ctx)
		t.log.Info("outboxredis: pending entries deleted from the stream; acknowledged", "entries", len(gone), "error", err)
	}
	return msgs, nil
}

// wake is when the consumer must look at its pending entries next.
func (t *transport) wake() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.nextClaim
	for _, at := range t.due {
		if at.IsZero() {
			at = t.nextPoll
		}
		if at.Before(w) {
			w = at
		}
	}
	return w
}

// setDue makes a held entry due again at at. In key order, an entry handed
// back without a delay (it waited for its predecessor, or came after one
// of its key that did not succeed) is due at the next poll, every
// orderPoll, or at once after an acknowledgement (progress): each poll
// looks at the lowest of them, the keys' heads, not at each on its own
// clock (which would keep checking entries still waiting).
func (t *transport) setDue(id string, at time.Time, wait bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wait && t.cfg.keyOrder {
		at = time.Time{}
	}
	t.due[id] = at
}

// progress makes the next poll of the waiting entries due at once.
func (t *transport) progress() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextPoll = time.Time{}
}

// taken removes a due entry from the ones waiting, when it is received.
func (t *transport) taken(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.due, id)
}

// forget stops holding id: settled, or no longer this consumer's.
func (t *transport) forget(id string) {
	t.taken(id)
	if k := t.keep; k != nil {
		k.drop(id)
	}
}

// forgetAll forgets every entry held (the group is gone).
func (t *transport) forgetAll() {
	t.mu.Lock()
	clear(t.due)
	t.mu.Unlock()
	if t.keep != nil {
		t.keep.dropAll()
	}
}

// compareIDs orders stream entry ids ("<ms>-<seq>") as Redis does.
func compareIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	num := func(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }
	return cmp.Or(cmp.Compare(num(am), num(bm)), cmp.Compare(num(as), num(bs)))
}
