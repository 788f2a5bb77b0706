package outboxasynq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
)

// Task headers written by a Publisher WithKeyChain on the task of an event
// with a PartitionKey: the queue and id of the task enqueued before it for
// the same key. The first task of a key has neither.
const (
	HeaderAfterQueue = "outbox-after-queue"
	HeaderAfterID    = "outbox-after-id"
)

// KeyChainTTL is how long a Publisher WithKeyChain remembers the last task
// of a partition key after enqueuing it. A task enqueued later than that
// has no predecessor: if the previous one has not run by then (servers
// stopped for longer), the two may run in either order.
const KeyChainTTL = 7 * 24 * time.Hour

// ChainKey returns the Redis key in which a Publisher WithKeyChain keeps
// the last task enqueued for partitionKey.
func ChainKey(partitionKey string) string { return "outboxasynq:chain:" + partitionKey }

// taskRef names a task: its queue and id.
type taskRef struct {
	Queue string `json:"q"`
	ID    string `json:"id"`
}

// advanceScript moves a key's chain from its expected last task to the
// new one, or keeps it when it is already there; it returns 0 when the
// chain holds something else. KEYS[1] is the chain, ARGV[1] the expected
// value ("" for none), ARGV[2] the new one, ARGV[3] the TTL in ms.
var advanceScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1]) or ''
if cur == ARGV[1] or cur == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

// chain is what a Publisher WithKeyChain uses.
type chain struct {
	rdb  redis.UniversalClient
	insp *asynq.Inspector
}

// last reads the key's last task, as stored ("" for none) and decoded.
func (c *chain) last(ctx context.Context, key string) (string, taskRef, error) {
	raw, err := c.rdb.Get(ctx, ChainKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", taskRef{}, nil
	}
	if err != nil {
		return "", taskRef{}, fmt.Errorf("outboxasynq: reading the chain of key %q: %w", key, err)
	}
	var ref taskRef
	if err := json.Unmarshal([]byte(raw), &ref); err != nil {
		return "", taskRef{}, nil // not ours: start the chain afresh
	}
	return raw, ref, nil
}

// advance records task as the key's last, if the chain still ends at
// expected (the task's predecessor). It reports whether it did.
func (c *chain) advance(ctx context.Context, key, expected string, task taskRef) (bool, error) {
	b, _ := json.Marshal(task)
	n, err := advanceScript.Run(ctx, c.rdb, []string{ChainKey(key)}, expected, string(b),
		strconv.FormatInt(KeyChainTTL.Milliseconds(), 10)).Int()
	if err != nil {
		return false, fmt.Errorf("outboxasynq: recording task %s as the last of key %q: %w", task.ID, key, err)
	}
	return n == 1, nil
}

// predecessorOf returns, as stored in the chain, the predecessor named by
// the headers of the task already enqueued for an event (a redelivery).
func (c *chain) predecessorOf(queue, id string) (string, error) {
	info, err := c.insp.GetTaskInfo(queue, id)
	if err != nil {
		return "", fmt.Errorf("outboxasynq: reading task %s of queue %q: %w", id, queue, err)
	}
	prev := taskRef{Queue: info.Headers[HeaderAfterQueue], ID: info.Headers[HeaderAfterID]}
	if prev.ID == "" {
		return "", nil
	}
	b, _ := json.Marshal(prev)
	return string(b), nil
}

// withPredecessor returns headers plus the predecessor's headers.
func withPredecessor(headers map[string]string, prev taskRef) map[string]string {
	if prev.ID == "" {
		return headers
	}
	if headers == nil {
		headers = make(map[string]string, 2)
	}
	headers[HeaderAfterQueue], headers[HeaderAfterID] = prev.Queue, prev.ID
	return headers
}

// publishChained enqueues the task of a keyed event naming the key's last
// task as its predecessor, then records it as the key's last. A task
// already enqueued for the event (a redelivery) is recorded as the key's
// last if the chain still ends at its predecessor.
func (p *Publisher) publishChained(ctx context.Context, e *outbox.Envelope, task *asynq.Task, opts []asynq.Option, queue string) error {
	key := e.PartitionKey
	raw, prev, err := p.chain.last(ctx, key)
	if err != nil {
		return p.failed(ctx, e, queue, err)
	}
	task = asynq.NewTaskWithHeaders(task.Type(), task.Payload(), withPredecessor(task.Headers(), prev))
	_, err = p.client.EnqueueContext(ctx, task, opts...)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		if raw, err = p.chain.predecessorOf(queue, e.ID); err != nil {
			return p.failed(ctx, e, queue, err)
		}
	case err != nil:
		return p.failed(ctx, e, queue, err)
	}
	ok, err := p.chain.advance(ctx, key, raw, taskRef{Queue: queue, ID: e.ID})
	if err != nil {
		return p.failed(ctx, e, queue, err)
	}
	if !ok {
		p.cfg.Logger.WarnContext(ctx, "the chain of a partition key moved while its event was enqueued; not recorded as its last",
			"event_id", e.ID, "queue", queue)
	}
	return nil
}
