package relay

import (
	"context"
	"strings"
	"sync"

	"github.com/gormoutbox/outbox"
)

// maxReceiptLen bounds a receipt, in bytes, as stored.
const maxReceiptLen = 1024

// SetReceipt records where a publisher delivered e, such as
// "orders/2@1234" (a Kafka topic, partition and offset), so that the
// attempt log (WithAttemptLog) keeps it with the published outcome
// (Attempt.Receipt). A publisher calls it from Publish or PublishBatch,
// with the context the relay gave it and the envelope it was handed,
// before it returns nil for e. The relay keeps the last receipt set for
// e's event id, cut to 1,024 bytes, and only when e's outcome is
// published. Outside a relay's delivery, or without the attempt log, it
// does nothing, at the cost of a context lookup. It is safe for
// concurrent use.
func SetReceipt(ctx context.Context, e *outbox.Envelope, receipt string) {
	if e == nil || receipt == "" {
		return
	}
	if r, ok := ctx.Value(receiptsKey{}).(*receipts); ok {
		r.set(e, receipt)
	}
}

type receiptsKey struct{}

// receipts holds the receipts of one batch's deliveries, by event id
// (unique in a batch; the envelope a publisher is handed may be a copy
// carrying its span's trace context).
type receipts struct {
	mu sync.Mutex
	m  map[string]string
}

// withReceipts returns ctx carrying a receipts of its own, and it; or
// ctx and nil when the relay does not write the attempt log.
func (r *Relay) withReceipts(ctx context.Context) (context.Context, *receipts) {
	if !r.cfg.attemptLog {
		return ctx, nil
	}
	rc := &receipts{}
	return context.WithValue(ctx, receiptsKey{}, rc), rc
}

func (rc *receipts) set(e *outbox.Envelope, receipt string) {
	if len(receipt) > maxReceiptLen {
		receipt = receipt[:maxReceiptLen]
	}
	receipt = strings.ToValidUTF8(strings.ReplaceAll(receipt, "\x00", ""), "?")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.m == nil {
		rc.m = map[string]string{}
	}
	rc.m[e.ID] = receipt
}

// of returns e's receipt, "" for none.
func (rc *receipts) of(e *outbox.Envelope) string {
	if rc == nil {
		return ""
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.m[e.ID]
}
