package outboxkafka_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// outcomes counts what a Publisher's batches returned.
type outcomes struct {
	*outboxkafka.Publisher
	unavailable, tooLarge, other atomic.Int64
}

func (p *outcomes) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := p.Publisher.PublishBatch(ctx, es)
	for _, err := range errs {
		switch {
		case err == nil:
		case outbox.IsUnavailable(err):
			p.unavailable.Add(1)
		case errors.Is(err, outboxkafka.ErrTooLarge) && outbox.IsPermanent(err):
			p.tooLarge.Add(1)
		default:
			p.other.Add(1)
		}
	}
	return errs
}

// drain is a keyed backlog the fault tests drain through a relay: n events
// over 16 partition keys to a topic of 6 partitions whose records may be
// 8,000 bytes at most, the events of big too large for it.
type drain struct {
	t     *testing.T
	c     *cluster
	db    *gorm.DB
	n     int
	big   []int
	topic string
	pub   *outcomes
	stop  func()
}

func newDrain(t *testing.T, c *cluster, dialect string, n int, big []int, ackTimeout time.Duration) *drain {
	t.Helper()
	db, _ := outboxDB(t, dialect)
	maxBytes := "8000"
	d := &drain{t: t, c: c, db: db, n: n, big: big, topic: c.topic(t, 6, map[string]*string{"max.message.bytes": &maxBytes})}
	emitKeyedWith(t, db, n, d.topic, func(i int) any {
		if slices.Contains(big, i) {
			return map[string]any{"i": i, "blob": incompressible(12000)}
		}
		return map[string]int{"i": i}
	})
	d.pub = &outcomes{Publisher: newPublisher(t, c.client(t), outboxkafka.WithAckTimeout(ackTimeout))}
	d.stop = startRelay(t, newRelay(t, db, d.pub, relay.WithBatchSize(50), relay.WithLease(10*time.Second)))
	return d
}

// settled reports whether every event is published or dead.
func (d *drain) settled() bool {
	return countStatus(d.t, d.db, outbox.StatusPublished)+countStatus(d.t, d.db, outbox.StatusDead) == int64(d.n)
}

// check waits for the backlog to settle, then checks that exactly the big
// events are dead (too large), every other one is in the topic, at least
// once, in per-key order, and that no event spent more than one attempt.
func (d *drain) check() {
	t := d.t
	t.Helper()
	eventually(t, 60*time.Second, "the backlog settled", d.settled)
	d.stop()
	var dead []string
	must(t, d.db.Model(&outbox.OutboxEvent{}).Where("status = ?", outbox.StatusDead).Order("event_id").Pluck("event_id", &dead).Error)
	var want []string
	for _, i := range d.big {
		want = append(want, eventID(i))
	}
	if !slices.Equal(dead, want) {
		t.Errorf("dead events %v, want the too large ones %v", dead, want)
	}
	if most := attemptsSpent(t, d.db); most != 1 {
		t.Errorf("an event spent %d attempts, want 1: the faults spent attempts", most)
	}
	ds := decode(t, d.c.records(t, d.topic))
	seen := map[string]bool{}
	for _, x := range ds {
		seen[x.env.ID] = true
	}
	for i := range d.n {
		if seen[eventID(i)] == slices.Contains(d.big, i) {
			t.Errorf("event %d: in the topic %v, too large %v", i, seen[eventID(i)], slices.Contains(d.big, i))
		}
	}
	checkOrder(t, ds)
	if n := d.pub.other.Load(); n != 0 {
		t.Errorf("%d failures neither unavailable nor too large", n)
	}
}

// Errors injected into produce requests while a keyed backlog drains, on
// each database, with three events too large for the topic among it:
// NOT_LEADER_FOR_PARTITION and REQUEST_TIMED_OUT, which the client retries;
// the broker's MESSAGE_TOO_LARGE for the record batches holding a large
// event, whose neighbours go again one per partition; and a
// NOT_LEADER_FOR_PARTITION that lasts past the ack timeout (Unavailable:
// the relay releases the events without spending attempts). Exactly the
// large events die, every other one is published at least once, none
// spends more than one attempt, and no key's events are reordered.
func TestBrokerErrorsKeepKeyOrder(t *testing.T) {
	testenv.LongFault(t)
	const n = 600
	c := newFake(t)
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			d := newDrain(t, c, dialect, n, []int{40, 41, 300}, 300*time.Millisecond)
			for _, f := range []struct {
				err *kerr.Error
				n   int
			}{{kerr.NotLeaderForPartition, 4}, {kerr.RequestTimedOut, 4}, {kerr.NotLeaderForPartition, 2}, {kerr.RequestTimedOut, 2}} {
				<-c.failProduce(t, f.err, f.n).Done()
				time.Sleep(30 * time.Millisecond)
			}
			if d.settled() {
				t.Fatal("the backlog settled before the last fault: it tested nothing")
			}
			long := c.failProduce(t, kerr.NotLeaderForPartition, -1)
			eventually(t, 20*time.Second, "an unavailable batch", func() bool { return d.pub.unavailable.Load() > 0 })
			long.Stop()
			d.check()
			if d.pub.tooLarge.Load() != 3 {
				t.Errorf("%d events too large, want 3", d.pub.tooLarge.Load())
			}
		})
	}
}

// Partition leaders move, then a broker is removed, while a keyed backlog
// drains, on each database: every event is published (but the too large
// ones), none spends more than one attempt, no key's events are
// reordered.
func TestLeadersMoveAndBrokerLeaves(t *testing.T) {
	testenv.LongFault(t)
	const n = 1500
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			c := newFake(t)
			d := newDrain(t, c, dialect, n, []int{700}, 2*time.Second)
			for i := 0; i < 6 && !d.settled(); i++ {
				c.fake.ShufflePartitionLeaders()
				time.Sleep(20 * time.Millisecond)
				must(t, c.fake.MoveTopicPartition(d.topic, int32(i), int32(i%3)))
				time.Sleep(20 * time.Millisecond)
			}
			if d.settled() {
				t.Fatal("the backlog settled before the broker left: the faults came too late to test anything")
			}
			must(t, c.fake.RemoveNode(c.fake.LeaderFor(d.topic, 0)))
			d.check()
		})
	}
}
