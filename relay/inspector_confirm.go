package relay

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/gormoutbox/outbox"
)

// ErrChanged is returned (wrapped) by the operations that act on a
// confirmed state (SkipKeyHeadIfUnchanged, ReplayAllIfUnchanged) when
// the events are no longer in the state that was confirmed: nothing was
// changed.
var ErrChanged = errors.New("relay: changed meanwhile")

// EventState is an event as an operator saw it before confirming a
// repair: its event id, status and claim version. Every claim raises the
// claim version, so an event that was delivered, failed or died again
// since is not in the state seen, even when its status is the same.
type EventState struct {
	EventID      string
	Status       outbox.Status
	ClaimVersion int64
}

// StateOf returns the state of e.
func StateOf(e *outbox.OutboxEvent) EventState {
	return EventState{EventID: e.EventID, Status: e.Status, ClaimVersion: e.ClaimVersion}
}

// ReplayIfUnchanged is Replay of the given events, each only if it is
// still dead with the claim version given: one that was replayed,
// delivered or died again since is left alone (and not counted). It
// reports how many it replayed. The state is checked by the UPDATE
// itself, so that a repeated call replays nothing more.
func (i *Inspector) ReplayIfUnchanged(ctx context.Context, states ...EventState) (int64, error) {
	return i.at(ctx).resetIfUnchanged("replaying", states, outbox.StatusDead)
}

// RedeliverIfUnchanged is Redeliver of the given events, each only if it
// is still in the status (published or dead) and claim version given,
// and reports how many it redelivered. An event replayed, delivered or
// redelivered since is left alone: a confirmation submitted twice
// redelivers once.
func (i *Inspector) RedeliverIfUnchanged(ctx context.Context, states ...EventState) (int64, error) {
	return i.at(ctx).resetIfUnchanged("redelivering", states, outbox.StatusPublished, outbox.StatusDead)
}

// resetIfUnchanged returns the events of states whose status is one of
// allowed to pending, each if it is still in its state: one UPDATE per
// distinct status and claim version, chunked by idChunk ids.
func (o *ops) resetIfUnchanged(verb string, states []EventState, allowed ...outbox.Status) (int64, error) {
	type group struct {
		status  outbox.Status
		version int64
	}
	groups := map[group][]string{}
	for _, s := range states {
		if slices.Contains(allowed, s.Status) {
			g := group{s.Status, s.ClaimVersion}
			groups[g] = append(groups[g], s.EventID)
		}
	}
	var total int64
	for g, ids := range groups {
		err := inChunks(ids, func(ids []string) error {
			n, err := o.replay(o.tbl().Where("status = ? AND claim_version = ? AND event_id IN ?", string(g.status), g.version, ids))
			total += n
			return err
		})
		if err != nil {
			return total, fmt.Errorf("relay: %s %d events: %w", verb, len(states), err)
		}
	}
	return total, nil
}

// SkipKeyHeadIfUnchanged is SkipKeyHead of a confirmed head: it marks
// the failed head of partitionKey dead only if that head is still the
// event head names, failed, with the claim version given. Otherwise it
// changes nothing and fails with an error wrapping ErrChanged: the head
// was delivered, retried or skipped since, and the key's new head, which
// nobody confirmed, is left alone.
func (i *Inspector) SkipKeyHeadIfUnchanged(ctx context.Context, partitionKey string, head EventState) (string, error) {
	if partitionKey == "" {
		return "", fmt.Errorf("%w: an empty partition key has no head", ErrInvalidOption)
	}
	o := i.at(ctx)
	h, err := o.keyHead(partitionKey)
	if err != nil {
		return "", err
	}
	if h == nil || h.EventID != head.EventID || h.Status != outbox.StatusFailed || head.Status != outbox.StatusFailed || h.ClaimVersion != head.ClaimVersion {
		return "", fmt.Errorf("%w: event %s is no longer the failed head of key %q it was", ErrChanged, head.EventID, partitionKey)
	}
	if err := o.skipHead(partitionKey, h); err != nil {
		if errors.Is(err, ErrKeyNotBlocked) {
			return "", fmt.Errorf("%w: %w", ErrChanged, err)
		}
		return "", err
	}
	return h.EventID, nil
}

// DeadSet is the set of dead events a filter matched at one moment, as a
// confirmation showed it: how many, and a digest of their row ids and
// claim versions. ReplayAllIfUnchanged replays that set or nothing.
type DeadSet struct {
	Count  int64
	Digest string
}

// DeadSetOf returns the dead events matching f (its cursors and Limit
// ignored) as a DeadSet. It reads their ids and claim versions through
// the dead index.
func (i *Inspector) DeadSetOf(ctx context.Context, f Filter) (DeadSet, error) {
	_, s, err := i.at(ctx).deadSet(f)
	return s, err
}

// ReplayAllIfUnchanged is ReplayAll of a confirmed set: it replays the
// dead events matching f only if they are still the set s (the same
// events, none replayed, delivered or dead again since, none more), and
// otherwise changes nothing and fails with an error wrapping ErrChanged.
// Each event is replayed only if it is still dead with the claim version
// read, so that a confirmation submitted twice replays once.
func (i *Inspector) ReplayAllIfUnchanged(ctx context.Context, f Filter, s DeadSet) (int64, error) {
	o := i.at(ctx)
	rows, now, err := o.deadSet(f)
	if err != nil {
		return 0, err
	}
	if now != s {
		return 0, fmt.Errorf("%w: %d dead event(s) matched, %d match now", ErrChanged, s.Count, now.Count)
	}
	byVersion := map[int64][]int64{}
	for _, r := range rows {
		byVersion[r.ClaimVersion] = append(byVersion[r.ClaimVersion], r.ID)
	}
	var total int64
	for v, ids := range byVersion {
		for len(ids) > 0 {
			n := min(len(ids), idChunk)
			done, err := o.replay(o.tbl().Where("status = ? AND claim_version = ? AND id IN ?", string(outbox.StatusDead), v, ids[:n]))
			total += done
			if err != nil {
				return total, fmt.Errorf("relay: replaying dead events: %w", err)
			}
			ids = ids[n:]
		}
	}
	return total, nil
}

// deadRow is a dead event's row id and claim version.
type deadRow struct {
	ID, ClaimVersion int64
}

// deadSet reads the dead events matching f, by row id, and digests them.
func (o *ops) deadSet(f Filter) ([]deadRow, DeadSet, error) {
	f.AfterID, f.BeforeID = 0, 0
	var all []deadRow
	for {
		var page []deadRow
		err := o.where(outbox.StatusDead, f).Select("id, claim_version").Order("id").Limit(idChunk).Scan(&page).Error
		if err != nil {
			return nil, DeadSet{}, fmt.Errorf("relay: reading dead events: %w", err)
		}
		all = append(all, page...)
		if len(page) < idChunk {
			break
		}
		f.AfterID = page[len(page)-1].ID
	}
	h := sha256.New()
	var b [16]byte
	for _, r := range all {
		binary.BigEndian.PutUint64(b[:8], uint64(r.ID))
		binary.BigEndian.PutUint64(b[8:], uint64(r.ClaimVersion))
		h.Write(b[:])
	}
	return all, DeadSet{Count: int64(len(all)), Digest: hex.EncodeToString(h.Sum(nil)[:16])}, nil
}
