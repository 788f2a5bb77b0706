package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
)

// countingPublisher is the watermill forwarders' destination: it counts
// the messages forwarded and the distinct ones (by UUID), so that a
// message two forwarders both delivered shows.
type countingPublisher struct {
	target int64
	calls  atomic.Int64
	mu     sync.Mutex
	seen   map[string]struct{}
	first  func(*message.Message) // called on a message's first arrival
	once   sync.Once
	done   chan struct{} // closed once target distinct messages arrived
}

func newCountingPublisher(target int) *countingPublisher {
	return &countingPublisher{target: int64(target), seen: map[string]struct{}{}, done: make(chan struct{})}
}

// Publish implements message.Publisher.
func (p *countingPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.calls.Add(int64(len(msgs)))
	for _, m := range msgs {
		p.mu.Lock()
		_, dup := p.seen[m.UUID]
		p.seen[m.UUID] = struct{}{}
		n := int64(len(p.seen))
		p.mu.Unlock()
		if !dup && p.first != nil {
			p.first(m)
		}
		if n >= p.target {
			p.once.Do(func() { close(p.done) })
		}
	}
	return nil
}

// Close implements message.Publisher.
func (p *countingPublisher) Close() error { return nil }

// publishWatermill writes msgs in tx as watermill's forwarder publisher
// does: enveloped, into the forwarder topic's table.
func publishWatermill(tx *sql.Tx, msgs ...*message.Message) error {
	pub, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}}, nil)
	if err != nil {
		return err
	}
	return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: wmTopic}).Publish("orders", msgs...)
}

// startForwarders runs n forwarders of wmTopic into pub, each on a
// subscriber of its own in the same (default) consumer group, until stop.
// A forwarder that stops early sends its error on stopped.
func (e *env) startForwarders(ctx context.Context, n int, pub message.Publisher) (stopped <-chan error, stop func(), err error) {
	errs := make(chan error, n)
	var fwds []*forwarder.Forwarder
	stop = func() {
		for _, f := range fwds {
			_ = f.Close()
		}
	}
	for range n {
		sub, err := newWatermillSubscriber(e.sqlDB)
		if err != nil {
			stop()
			return nil, nil, err
		}
		fwd, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: wmTopic})
		if err != nil {
			stop()
			return nil, nil, err
		}
		fwds = append(fwds, fwd)
		go func() { errs <- fwd.Run(ctx) }()
	}
	return errs, stop, nil
}

// fillWatermill publishes n forwarder envelopes, 500 per transaction, and
// returns the timed drain by relays forwarders.
func (e *env) fillWatermill(ctx context.Context, relays, n int) (func(context.Context) (string, error), error) {
	for i := 0; i < n; i += 500 {
		tx, err := e.sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		var msgs []*message.Message
		for j := i; j < min(i+500, n); j++ {
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"order_id":%d,"customer":"customer","amount":12.34}`, j+1)))
		}
		if err := publishWatermill(tx, msgs...); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
		if err := tx.Commit(); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) (string, error) {
		counter := newCountingPublisher(n)
		stopped, stop, err := e.startForwarders(ctx, relays, counter)
		if err != nil {
			return "", err
		}
		defer stop()
		select {
		case <-counter.done:
			return fmt.Sprintf("%d messages forwarded", counter.calls.Load()), nil
		case err := <-stopped:
			return "", fmt.Errorf("forwarder stopped: %v", err)
		case <-time.After(5 * time.Minute):
			return "", errors.New("timed out")
		}
	}, nil
}

// watermillLatency starts one forwarder, configured as in the drain,
// marking each message as it forwards it, and returns how to commit event
// i (the forwarder publisher's write in its own transaction).
func (e *env) watermillLatency(ctx context.Context, mark func(int)) (commit func(context.Context, int) (time.Time, error), stop func(), err error) {
	counter := newCountingPublisher(1 << 62)
	counter.first = func(m *message.Message) {
		i, err := strconv.Atoi(m.Metadata.Get("seq"))
		if err == nil {
			mark(i)
		}
	}
	if _, stop, err = e.startForwarders(ctx, 1, counter); err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, i int) (time.Time, error) {
		tx, err := e.sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return time.Time{}, err
		}
		msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"order_id":%d,"customer":"customer","amount":12.34}`, i))
		msg.Metadata.Set("seq", strconv.Itoa(i))
		if err := publishWatermill(tx, msg); err != nil {
			_ = tx.Rollback()
			return time.Time{}, err
		}
		sent := time.Now()
		return sent, tx.Commit()
	}, stop, nil
}
