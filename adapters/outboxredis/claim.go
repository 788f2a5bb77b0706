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
	deliveries int64     // Redis's count, when listed (0: not known yet)
	at         time.Time // when it became due
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
		t.more = full
	}
	due := t.dueEntries(now, listed)
	if int64(len(due)) == t.cfg.count {
		t.more = true
	}
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
		t.setDue(id, now)
	}
	if len(got) > 0 {
		t.log.Info("outboxredis: adopted messages idle too long; handling them here", "messages", len(got), "min_idle", t.cfg.minIdle)
	}
	return int64(len(got)) == t.cfg.count, nil
}

// listOwn lists this consumer's pending entries: all those it knows of
// (handed back, waiting for their delay), and up to WithCount more.
func (t *transport) listOwn(ctx context.Context) ([]redis.XPendingExt, error) {
	t.mu.Lock()
	n := min(t.cfg.count+int64(len(t.due)), 10000)
	t.mu.Unlock()
	p, err := t.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: t.stream, Group: t.group, Consumer: t.name, Start: "-", End: "+", Count: n,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("outboxredis: XPENDING %s: %w", t.stream, err)
	}
	return p, nil
}

// dueEntries returns, in entry order, up to WithCount entries that are
// due, those due the longest first: known ones whose due time has passed,
// and listed ones it does not know of that have been idle for the retry
// delay (held from here on).
func (t *transport) dueEntries(now time.Time, listed []redis.XPendingExt) []pendingRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []pendingRef
	counts := make(map[string]int64, len(listed))
	for _, p := range listed {
		counts[p.ID] = p.RetryCount
		if _, known := t.due[p.ID]; !known && p.Idle >= t.retryDelay {
			t.keep.hold(now.Add(-p.Idle), p.ID)
			due = append(due, pendingRef{id: p.ID, deliveries: p.RetryCount, at: now.Add(t.retryDelay - p.Idle)})
		}
	}
	for id, at := range t.due {
		if !at.After(now) {
			due = append(due, pendingRef{id: id, deliveries: counts[id], at: at})
		}
	}
	slices.SortFunc(due, func(a, b pendingRef) int { return cmp.Or(a.at.Compare(b.at), compareIDs(a.id, b.id)) })
	due = due[:min(int64(len(due)), t.cfg.count)]
	slices.SortFunc(due, func(a, b pendingRef) int { return compareIDs(a.id, b.id) })
	return due
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
		if at.Before(w) {
			w = at
		}
	}
	return w
}

// setDue makes a held entry due again at at.
func (t *transport) setDue(id string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.due[id] = at
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
