package outboxamqp

import (
	"context"
	"fmt"
	"regexp"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
)

// confirmChannel is a channel in confirm mode, with its listeners. One
// batch at a time uses it.
type confirmChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	closes  chan *amqp.Error
	returns chan amqp.Return
}

// openConfirmChannel opens a channel on conn and puts it in confirm mode,
// giving up when ctx ends first (amqp091's calls take no context: a
// channel opened after that is closed).
func openConfirmChannel(ctx context.Context, conn *amqp.Connection) (*confirmChannel, error) {
	return withContext(ctx, func() (*confirmChannel, error) {
		ch, err := conn.Channel()
		if err != nil {
			return nil, outbox.Unavailable(fmt.Errorf("%w: opening a channel: %w", ErrConnectionClosed, err))
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return nil, outbox.Unavailable(fmt.Errorf("%w: putting a channel in confirm mode: %w", ErrConnectionClosed, err))
		}
		return &confirmChannel{
			conn: conn,
			ch:   ch,
			// The library sends a channel's close reason before it nacks the
			// unconfirmed messages, and a return before its message's ack:
			// both are here by the time a confirm says so.
			closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
			returns: ch.NotifyReturn(make(chan amqp.Return, 128)),
		}, nil
	}, func(cc *confirmChannel) { _ = cc.ch.Close() })
}

// withContext runs f, a call to the broker that takes no context, and
// returns its result, or an Unavailable error when ctx ends first; a
// result that comes after that is handed to discard.
func withContext[T any](ctx context.Context, f func() (T, error), discard func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				discard(r.v)
			}
		}()
		var zero T
		return zero, outbox.Unavailable(fmt.Errorf("%w: the broker did not answer before the deadline: %w", ErrConfirmTimeout, ctx.Err()))
	}
}

// roundResult is what one round leaves to do.
type roundResult struct {
	retry    []*item // publish again, on another channel
	alone    bool    // the channel closed over a message that could not be told: go one by one
	down     error   // the connection is down: give this to every item left
	reusable bool    // the channel can serve another batch
}

// round publishes items on cc and waits for their confirms, recording the
// results it settles in errs.
func (cc *confirmChannel) round(ctx context.Context, items []*item, timeout time.Duration, errs []error) roundResult {
	drain(cc.returns) // nothing of an earlier batch is pending, but be sure
	dcs := make([]*amqp.DeferredConfirmation, 0, len(items))
	var sendErr error
	for _, it := range items {
		dc, err := cc.ch.PublishWithDeferredConfirmWithContext(ctx, it.exchange, it.key, true, false, it.msg)
		if err != nil {
			sendErr = err
			break
		}
		dcs = append(dcs, dc)
	}
	w := cc.wait(ctx, dcs, timeout)
	if sendErr != nil && w.abort == nil && !w.closed {
		if ctx.Err() != nil {
			w.abort = ctx.Err()
		} else {
			w.closed = true // a failed publish means a closed channel or connection
		}
	}
	if w.closed || cc.ch.IsClosed() {
		return cc.closedRound(items, dcs, w, errs)
	}
	var res roundResult
	for i, it := range items {
		switch {
		case i >= len(dcs) || !isDone(dcs[i]):
			errs[it.idx] = outbox.Unavailable(fmt.Errorf("%w: event %s (%s) to %s: %w", ErrConfirmTimeout, it.env.ID, it.env.Type, where(it), w.abort))
		case !dcs[i].Acked():
			errs[it.idx] = outbox.Unavailable(fmt.Errorf("%w: event %s (%s) to %s", ErrNacked, it.env.ID, it.env.Type, where(it)))
		default:
			errs[it.idx] = unroutable(it, w.returned)
		}
	}
	// A channel with messages still unconfirmed would hand their late
	// confirms and returns to the next batch: close it.
	res.reusable = w.abort == nil
	return res
}

// waited is what waiting for a round's confirms saw.
type waited struct {
	returned map[string]amqp.Return // by message id
	closed   bool
	closeErr *amqp.Error
	abort    error // the context ended or the confirm timeout passed
}

// wait waits for every confirm of dcs, collecting returns, until the
// channel closes, ctx ends or timeout (if positive) passes.
func (cc *confirmChannel) wait(ctx context.Context, dcs []*amqp.DeferredConfirmation, timeout time.Duration) waited {
	w := waited{returned: map[string]amqp.Return{}}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	returns := cc.returns
	for next := 0; next < len(dcs) && !w.closed && w.abort == nil; {
		select {
		case <-dcs[next].Done():
			next++
		case r, ok := <-returns:
			if !ok {
				returns = nil // closed with the channel: the close comes next
				continue
			}
			w.returned[r.MessageId] = r
		case e := <-cc.closes: // nil when closed without an error
			w.closed, w.closeErr = true, e
		case <-ctx.Done():
			w.abort = ctx.Err()
		case <-expired:
			w.abort = fmt.Errorf("no confirm within %v", timeout)
		}
	}
	collectReturns(cc.returns, w.returned)
	if !w.closed {
		select {
		case e := <-cc.closes:
			w.closed, w.closeErr = true, e
		default:
		}
	}
	return w
}

// closedRound settles a round whose channel closed: messages confirmed
// before are settled as usual; the others are blamed on the close.
func (cc *confirmChannel) closedRound(items []*item, dcs []*amqp.DeferredConfirmation, w waited, errs []error) roundResult {
	var (
		res     roundResult
		pending []*item
	)
	for i, it := range items {
		if i < len(dcs) && isDone(dcs[i]) && dcs[i].Acked() {
			errs[it.idx] = unroutable(it, w.returned)
			continue
		}
		pending = append(pending, it)
	}
	if len(pending) == 0 {
		return res
	}
	ce := w.closeErr
	if cc.conn.IsClosed() || ce == nil || !ce.Server || !ce.Recover {
		// The connection died, or the channel closed for reasons of its
		// own (or ours): not the messages' fault.
		reason := "the channel closed"
		if ce != nil {
			reason = ce.Error()
		}
		res.down = outbox.Unavailable(fmt.Errorf("%w: %s", ErrConnectionClosed, reason))
		res.retry = pending
		return res
	}
	// A channel exception: one message was refused. Blame the messages of
	// the exchange it names, or the only one; publish the others again.
	blamed := exchangeIn(ce.Reason)
	for _, it := range pending {
		if (blamed != "" && it.exchange == blamed) || len(items) == 1 {
			errs[it.idx] = fmt.Errorf("%w: event %s (%s) to %s: %w", ErrRefused, it.env.ID, it.env.Type, where(it), ce)
			continue
		}
		res.retry = append(res.retry, it)
	}
	res.alone = len(res.retry) == len(pending) // nobody blamed: go one by one
	return res
}

// exchangeNamed finds the exchange in a channel exception's reason, such
// as "NOT_FOUND - no exchange 'orders' in vhost '/'".
var exchangeNamed = regexp.MustCompile(`exchange '((?:[^']|'')*)'`)

func exchangeIn(reason string) string {
	if m := exchangeNamed.FindStringSubmatch(reason); m != nil {
		return m[1]
	}
	return ""
}

// unroutable returns the error of a confirmed message: ErrUnroutable if
// the broker returned it, nil otherwise.
func unroutable(it *item, returned map[string]amqp.Return) error {
	r, ok := returned[it.msg.MessageId]
	if !ok {
		return nil
	}
	return fmt.Errorf("%w: event %s (%s) to %s: %d %s", ErrUnroutable, it.env.ID, it.env.Type, where(it), r.ReplyCode, r.ReplyText)
}

func where(it *item) string {
	if it.exchange == "" {
		return fmt.Sprintf("the default exchange, routing key %q", it.key)
	}
	return fmt.Sprintf("exchange %q, routing key %q", it.exchange, it.key)
}

func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

// drain discards the returns waiting in c.
func drain(c chan amqp.Return) { collectReturns(c, nil) }

// collectReturns moves the returns waiting in c into m (if not nil)
// without blocking.
func collectReturns(c chan amqp.Return, m map[string]amqp.Return) {
	for {
		select {
		case r, ok := <-c:
			if !ok {
				return
			}
			if m != nil {
				m[r.MessageId] = r
			}
		default:
			return
		}
	}
}
