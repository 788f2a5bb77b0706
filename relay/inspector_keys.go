package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/gormoutbox/outbox"
)

// BlockedKey is a partition key whose head, its oldest unfinished event,
// failed and waits for a retry: the events of the key behind it are held
// back until it is published, dies, or is skipped (SkipKeyHead).
type BlockedKey struct {
	// Head is the failed event, without payload and headers: its
	// attempts, last error and next attempt (AvailableAt) say why.
	Head outbox.OutboxEvent
	// Waiting counts the key's unfinished events behind the head.
	Waiting int64
}

// BlockedKeys returns up to limit (default 100, at most 1000) keys whose
// head failed, by head row id after the cursor afterHeadID (0 for the
// first page; pass the last Head.ID of a page for the next). A dead event
// does not hold its key (see Order in the package doc), so keys whose
// events died are not blocked; list them with ListEvents.
func (i *Inspector) BlockedKeys(ctx context.Context, afterHeadID int64, limit int) ([]BlockedKey, error) {
	o := i.at(ctx)
	var heads []struct {
		ID      int64
		Waiting int64
	}
	n := Filter{Limit: limit}.limit(100)
	if err := o.db.Raw(blockedKeysSQL(o.table), afterHeadID, n).Scan(&heads).Error; err != nil {
		return nil, fmt.Errorf("relay: finding blocked keys: %w", err)
	}
	if len(heads) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(heads))
	for k, h := range heads {
		ids[k] = h.ID
	}
	var rows []outbox.OutboxEvent
	if err := o.tbl().Select(listColumns).Where("id IN ?", ids).Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("relay: reading blocked keys' heads: %w", err)
	}
	byID := make(map[int64]outbox.OutboxEvent, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	out := make([]BlockedKey, 0, len(heads))
	for _, h := range heads {
		if r, ok := byID[h.ID]; ok {
			out = append(out, BlockedKey{Head: r, Waiting: h.Waiting})
		}
	}
	return out, nil
}

// ErrKeyNotBlocked is returned (wrapped) by SkipKeyHead when the key has
// no failed head to skip: no unfinished event, a head that is pending or
// in a relay's hands, or one that changed while it was being skipped.
var ErrKeyNotBlocked = errors.New("relay: key is not blocked")

// SkipKeyHead marks the failed head of a partition key dead, so that the
// key's next events are delivered, and returns the skipped event's id.
// Its last error records the skip and the error it had. The UPDATE checks
// the status and the claim version it read, so a head a relay claimed
// meanwhile is never touched. The skipped event stays in the table as any
// dead event: Replay delivers it again later (out of its key's order).
func (i *Inspector) SkipKeyHead(ctx context.Context, partitionKey string) (string, error) {
	if partitionKey == "" {
		return "", fmt.Errorf("%w: an empty partition key has no head", ErrInvalidOption)
	}
	o := i.at(ctx)
	h, err := o.keyHead(partitionKey)
	if err != nil {
		return "", err
	}
	if h == nil {
		return "", fmt.Errorf("%w: %q has no unfinished event", ErrKeyNotBlocked, partitionKey)
	}
	if h.Status != outbox.StatusFailed {
		return "", fmt.Errorf("%w: the head of %q (%s) is %s", ErrKeyNotBlocked, partitionKey, h.EventID, h.Status)
	}
	if err := o.skipHead(partitionKey, h); err != nil {
		return "", err
	}
	return h.EventID, nil
}

// keyHead is a key's first unfinished event.
type keyHead struct {
	ID           int64
	EventID      string
	Status       outbox.Status
	ClaimVersion int64
	LastError    *string
}

// keyHead reads the head of partitionKey: nil when the key has no
// unfinished event.
func (o *ops) keyHead(partitionKey string) (*keyHead, error) {
	var heads []keyHead
	if err := o.db.Raw(keyHeadSQL(o.table), partitionKey).Scan(&heads).Error; err != nil {
		return nil, fmt.Errorf("relay: reading the head of key %q: %w", partitionKey, err)
	}
	if len(heads) == 0 {
		return nil, nil
	}
	return &heads[0], nil
}

// skipHead marks h, the failed head of partitionKey, dead if it is still
// failed with the claim version read, recording the skip in its last
// error; ErrKeyNotBlocked when it changed meanwhile.
func (o *ops) skipHead(partitionKey string, h *keyHead) error {
	msg := "skipped by an operator to unblock key " + partitionKey
	if h.LastError != nil {
		msg += "; last error: " + *h.LastError
	}
	res := o.tbl().Where("id = ? AND status = ? AND claim_version = ?", h.ID, string(outbox.StatusFailed), h.ClaimVersion).
		Updates(map[string]any{"status": string(outbox.StatusDead), "last_error": msg, "locked_by": nil, "locked_until": nil})
	if res.Error != nil {
		return fmt.Errorf("relay: skipping the head of key %q: %w", partitionKey, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("%w: the head of %q (%s) changed meanwhile", ErrKeyNotBlocked, partitionKey, h.EventID)
	}
	newDriver(o.kind, o.table, false).notify(o.db)
	return nil
}
