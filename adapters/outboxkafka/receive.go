package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox/consume"
)

// pollWait is how long Receive waits for records when none is due.
const pollWait = 2 * time.Second

// partition is a partition's records in hand: fetched and not settled, in
// offset order, and its last settled record at the head (the commit).
type partition struct {
	queue     []*message
	next      int64       // the offset after the last record fetched
	done      *kgo.Record // the last record settled with every one before it
	committed *kgo.Record // the last record committed
}

// Receive commits what the last batch settled, lets a waiting rebalance
// go on, and returns the records due: for each partition, from the head of
// its queue, up to a record that waits for its retry delay. A partition
// whose queue is full is not fetched meanwhile.
func (t *transport) Receive(ctx context.Context) ([]consume.Message, error) {
	t.endBatch()
	cl, err := t.client()
	if err != nil {
		return nil, err
	}
	if err := t.commit(context.WithoutCancel(ctx), cl, t.inHand()); err != nil {
		t.log.Warn("outboxkafka: committing offsets failed; retried after the next batch", "topic", t.topic, "group", t.group, "error", err)
	}
	t.blocked.Store(false)
	cl.AllowRebalance()
	pctx, cancel := t.pollContext(ctx, cl)
	fs := cl.PollRecords(pctx, t.cfg.maxPoll)
	cancel()
	t.add(fs)
	msgs := t.due()
	if len(msgs) > 0 {
		t.mu.Lock()
		t.batch, t.out = make(chan struct{}), len(msgs)
		t.mu.Unlock()
	}
	var errs []error
	fs.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			errs = append(errs, fmt.Errorf("fetching %s/%d: %w", topic, p, err))
		}
	})
	if err := errors.Join(errs...); err != nil && len(msgs) == 0 {
		return nil, fmt.Errorf("outboxkafka: %w", err)
	} else if err != nil {
		t.log.Warn("outboxkafka: fetch errors", "topic", t.topic, "group", t.group, "error", err)
	}
	return msgs, nil
}

// pollContext pauses the partitions whose queue is full (and resumes the
// others), and returns the context of the poll: none when records are due
// now (PollRecords then returns what it has at once), else one that ends
// with ctx, at the next retry, or after pollWait.
func (t *transport) pollContext(ctx context.Context, cl *kgo.Client) (context.Context, context.CancelFunc) {
	t.mu.Lock()
	full := map[int32]bool{}
	wake := time.Now().Add(pollWait)
	for n, p := range t.parts {
		if len(p.queue) >= t.cfg.maxPoll {
			full[n] = true
		}
		if len(p.queue) > 0 && p.queue[0].due.Before(wake) {
			wake = p.queue[0].due
		}
	}
	t.mu.Unlock()
	var pause, resume []int32
	for _, n := range cl.PauseFetchPartitions(nil)[t.topic] {
		if !full[n] {
			resume = append(resume, n)
		}
		delete(full, n)
	}
	for n := range full {
		pause = append(pause, n)
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(map[string][]int32{t.topic: resume})
	}
	if len(pause) > 0 {
		cl.PauseFetchPartitions(map[string][]int32{t.topic: pause})
	}
	if !wake.After(time.Now()) {
		var now context.Context // nil: what is buffered, at once
		return now, func() {}
	}
	return context.WithDeadline(ctx, wake)
}

// add queues the records fetched.
func (t *transport) add(fs kgo.Fetches) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fs.EachRecord(func(r *kgo.Record) {
		p := t.parts[r.Partition]
		if p == nil {
			p = &partition{next: -1}
			t.parts[r.Partition] = p
		}
		if r.Offset < p.next {
			return // fetched again
		}
		p.next = r.Offset + 1
		p.queue = append(p.queue, &message{t: t, p: p, rec: r})
	})
}

// due marks the records due now as out and returns them, at most the max
// poll records, in offset order per partition.
func (t *transport) due() []consume.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	var out []consume.Message
	for _, p := range t.parts {
		for _, m := range p.queue {
			if m.due.After(now) || len(out) == t.cfg.maxPoll {
				break
			}
			if !m.settled {
				m.out = true
				out = append(out, m)
			}
		}
	}
	return out
}

// commit commits, for the partitions ps, the offset after their last
// record settled with every one before it, when it moved.
func (t *transport) commit(ctx context.Context, cl *kgo.Client, ps []*partition) error {
	t.mu.Lock()
	var recs []*kgo.Record
	var moved []*partition
	for _, p := range ps {
		if p.done != p.committed {
			recs, moved = append(recs, p.done), append(moved, p)
		}
	}
	t.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.CommitRecords(cctx, recs...); err != nil {
		return fmt.Errorf("committing %s for group %s: %w", t.topic, t.group, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, p := range moved {
		p.committed = recs[i]
	}
	return nil
}

// settle marks m settled, and moves its partition's commit past the
// settled records at the head of its queue.
func (t *transport) settle(m *message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m.settled = true
	t.handled(m)
	p := m.p
	for len(p.queue) > 0 && p.queue[0].settled {
		p.done = p.queue[0].rec
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
}
