package outboxredis

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
)

// Replicated appends (WithWaitReplicas).
//
// WAIT counts the replicas that acknowledged the writes made before it on
// the same connection, so the appends and their WAIT go, per master, in
// one pipeline of a client of that master alone (a cluster client routes a
// command without a key to any node).

// checkWaitClient reports why WithWaitReplicas cannot work with rdb.
func checkWaitClient(rdb redis.UniversalClient) error {
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nil
	}
	return fmt.Errorf("WithWaitReplicas needs a *redis.Client or a *redis.ClusterClient, not %T", rdb)
}

// masterFor returns the client of the master that holds stream.
func (p *StreamPublisher) masterFor(ctx context.Context, stream string) (*redis.Client, error) {
	switch c := p.rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, stream)
	case *redis.Client:
		return c, nil
	}
	return nil, checkWaitClient(p.rdb)
}

// publishReplicated appends es, one pipeline per master ending in WAIT,
// and returns one result per event: its append's own error, or
// outbox.Unavailable wrapping ErrNotReplicated when the master's WAIT
// counted fewer replicas than asked for.
func (p *StreamPublisher) publishReplicated(ctx context.Context, es []*outbox.Envelope) []error {
	errs := make([]error, len(es))
	args := make([]*redis.XAddArgs, len(es))
	byMaster := map[*redis.Client][]int{}
	idmp := p.useIDMP(ctx)
	for i, e := range es {
		a, err := p.args(e, idmp)
		if err != nil {
			errs[i] = err
			continue
		}
		args[i] = a
		m, err := p.masterFor(ctx, a.Stream)
		if err != nil {
			errs[i] = failed(ctx, e.ID, a.Stream, err)
			continue
		}
		byMaster[m] = append(byMaster[m], i)
	}
	var wg sync.WaitGroup
	for m, idx := range byMaster {
		wg.Go(func() { p.appendAndWait(ctx, m, es, args, idx, errs) })
	}
	wg.Wait()
	return errs
}

// appendAndWait appends the events idx of es to master m in one pipeline
// followed by WAIT, and sets their results in errs.
func (p *StreamPublisher) appendAndWait(ctx context.Context, m *redis.Client, es []*outbox.Envelope, args []*redis.XAddArgs, idx []int, errs []error) {
	pipe := m.Pipeline()
	cmds := make([]redis.Cmder, len(idx))
	for k, i := range idx {
		if p.chained(es[i]) {
			cmds[k] = p.appendChained(ctx, pipe, es[i], args[i])
		} else {
			cmds[k] = pipe.XAdd(ctx, args[i])
		}
	}
	// In a pipeline the client's ReadTimeout bounds the wait for every
	// reply, WAIT's included (see WithWaitReplicas).
	wait := redis.NewIntCmd(ctx, "wait", p.cfg.waitReplicas, p.cfg.waitTimeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for k, i := range idx {
		e, stream := es[i], args[i].Stream
		switch err := cmds[k].Err(); {
		case moved(err):
			// The stream's slot has moved (a failover): the master
			// looked up was stale. The cluster client learns the new one.
			if cc, ok := p.rdb.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx)
			}
			errs[i] = outbox.Unavailable(fmt.Errorf("outboxredis: XADD event %s to %s: the slot moved: %w", e.ID, stream, err))
		case err != nil:
			errs[i] = failed(ctx, e.ID, stream, err)
		case wait.Err() != nil:
			errs[i] = outbox.Unavailable(fmt.Errorf("outboxredis: WAIT after appending event %s to %s: %w: %w", e.ID, stream, ErrNotReplicated, wait.Err()))
		case wait.Val() < int64(p.cfg.waitReplicas):
			errs[i] = outbox.Unavailable(fmt.Errorf("outboxredis: event %s appended to %s: %w: %d of %d replicas acknowledged within %v",
				e.ID, stream, ErrNotReplicated, wait.Val(), p.cfg.waitReplicas, p.cfg.waitTimeout))
		}
	}
}

// moved reports whether err is a MOVED or ASK redirection: a client of one
// master, unlike the cluster client, does not follow them.
func moved(err error) bool {
	if err == nil {
		return false
	}
	_, m := redis.IsMovedError(err)
	_, a := redis.IsAskError(err)
	return m || a
}
