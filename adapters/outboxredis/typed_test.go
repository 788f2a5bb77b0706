package outboxredis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
)

// A typed handler gets the decoded payload, the envelope and the
// Delivery; an entry whose payload does not decode is dead at once.
func TestTypedHandlerOnAConsumer(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "typed")
	type Order struct{ ID string }
	var (
		mu   sync.Mutex
		seen []string
	)
	h := outboxredis.HandlerOf(func(ctx context.Context, o Order) error {
		e, ok1 := outboxredis.EnvelopeFrom(ctx)
		d, ok2 := outboxredis.DeliveryFrom(ctx)
		if !ok1 || !ok2 {
			return errors.New("no envelope or delivery in the context")
		}
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, e.ID+"="+o.ID+"@"+d.Stream)
		return nil
	})
	var dead deadRecorder
	publish(t, rdb, stream, envelope("good", "t"), &outbox.Envelope{ID: "bad", Type: "t", Payload: []byte(`{"ID":7}`)})
	stop := run(t, outboxredis.NewConsumer(rdb, stream, "g", "c", h, consumerOpts(t, dead.option())...))
	eventually(t, 10*time.Second, "both settled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 1 && len(dead.reasons()) == 1 && settled(t, rdb, stream, "g")
	})
	stop()
	if seen[0] != "good=good@"+stream {
		t.Errorf("handler saw %v", seen)
	}
	dead.mu.Lock()
	defer dead.mu.Unlock()
	if d := dead.msgs[0]; !errors.Is(d.Reason, outboxredis.ErrBadPayload) || !outbox.IsPermanent(d.Reason) || d.Deliveries != 1 {
		t.Errorf("dead %+v, want a permanent ErrBadPayload on the first delivery", d)
	}
}

func TestTypedHandlerOfNilIsRefused(t *testing.T) {
	rdb := newRedis(t)
	if err := outboxredis.NewConsumer(rdb, "s", "g", "c", outboxredis.HandlerOf[int](nil)).Validate(); !errors.Is(err, outboxredis.ErrInvalidOption) {
		t.Errorf("NewConsumer(HandlerOf(nil)): Validate = %v", err)
	}
}
