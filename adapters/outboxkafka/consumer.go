package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox/consume"
)

// DefaultMaxPollRecords is how many records a Consumer takes at most per
// poll, unless WithMaxPollRecords says otherwise.
const DefaultMaxPollRecords = 100

// Record is what a Kafka Consumer tells a handler of its record, in
// consume.Delivery.Details:
//
//	d, _ := consume.DeliveryFrom(ctx)
//	rec := d.Details.(outboxkafka.Record)
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Group     string
	Key       []byte
	Headers   []kgo.RecordHeader
	Timestamp time.Time
}

// consumerConfig is a Consumer's own settings (its transport options).
type consumerConfig struct {
	deadTopic string
	maxPoll   int
}

// WithDeadLetterTopic produces every dead record to topic before its
// offset is committed: the same key, value and headers, plus
// HeaderDeadReason, HeaderDeadTopic, HeaderDeadPartition, HeaderDeadOffset,
// HeaderDeadGroup and HeaderDeadDeliveries. The topic must exist (it is
// never created). If that produce fails, the record is not settled: it is
// handled again after the retry delay, and goes dead again. The default is
// none: a dead record is logged, given to consume.WithOnDead, and skipped.
// NewDeadLetters reads the topic.
func WithDeadLetterTopic(topic string) consume.Option {
	return consume.TransportOption("outboxkafka.WithDeadLetterTopic", func(c *consumerConfig) error {
		c.deadTopic = topic
		return checkTopic(topic)
	})
}

// WithMaxPollRecords bounds how many records a Consumer takes per poll
// (default DefaultMaxPollRecords, at least 1): a batch, which a rebalance
// waits for (see NewConsumer). A partition whose records waiting in the
// Consumer reach it is not fetched until they are handled.
func WithMaxPollRecords(n int) consume.Option {
	return consume.TransportOption("outboxkafka.WithMaxPollRecords", func(c *consumerConfig) error {
		c.maxPoll = n
		if n < 1 {
			return fmt.Errorf("max poll records %d is less than 1", n)
		}
		return nil
	})
}

// NewConsumer returns a Consumer of topic as a member of the consumer
// group group, that passes each event to h (see package consume for the
// handlers and the policy; the records' layout is Structured or Binary).
// Run it with Run; each Run makes a franz-go client of its own with
// client, the options of the connection (kgo.SeedBrokers, TLS, SASL,
// timeouts, kgo.ConsumeResetOffset for a group without offsets: from the
// start by default, …), to which it adds the group's (kgo.ConsumerGroup,
// kgo.ConsumeTopics, kgo.DisableAutoCommit, kgo.BlockRebalanceOnPoll and
// the rebalance callbacks), and closes it, leaving the group, when Run
// returns. opts are consume's shared options and WithDeadLetterTopic and
// WithMaxPollRecords. It returns errors wrapping consume.ErrInvalidOption
// for a bad option, topic or group, or client options that consume
// something else (kgo.ConsumeRegex, kgo.ConsumePartitions) or are
// transactional. It does not talk to the brokers.
func NewConsumer(client []kgo.Opt, topic, group string, h consume.Handler, opts ...consume.Option) (*consume.Consumer, error) {
	t := &transport{topic: topic, group: group, clientOpts: slices.Clip(client),
		cfg: consumerConfig{maxPoll: DefaultMaxPollRecords}}
	s := consume.SettingsOf(opts...)
	t.log, t.retryDelay = s.Logger, s.RetryDelay
	terr := consume.ApplyTransportOptions(&t.cfg, opts)
	if err := t.check(); err != nil {
		terr = errors.Join(terr, fmt.Errorf("%w: outboxkafka: %w", consume.ErrInvalidOption, err))
	}
	c, err := consume.New(t, h, opts...)
	if err != nil || terr != nil {
		return nil, errors.Join(err, terr)
	}
	return c, nil
}

// check reports a bad topic or group, or client options the Consumer
// cannot work with, and reads the rebalance timeout.
func (t *transport) check() error {
	if err := checkTopic(t.topic); err != nil {
		return err
	}
	if t.group == "" {
		return fmt.Errorf("empty consumer group")
	}
	cl, err := kgo.NewClient(t.clientOpts...)
	if err != nil {
		return fmt.Errorf("client options: %w", err)
	}
	defer cl.Close()
	parts, _ := cl.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset)
	switch txn, _ := cl.OptValues(kgo.TransactionalID)[1].(bool); {
	case optBool(cl, kgo.ConsumeRegex) || len(parts) > 0:
		return fmt.Errorf("the client options consume by regex or partitions: the Consumer reads its topic in its group")
	case txn:
		return fmt.Errorf("the client options are transactional (kgo.TransactionalID)")
	}
	rebalance, _ := cl.OptValue(kgo.RebalanceTimeout).(time.Duration)
	t.handlerTimeout = rebalance / 2
	return nil
}

// transport is a Kafka topic read in a consumer group, for a
// consume.Consumer. The records of each partition wait in its queue, in
// offset order, from their fetch until they are settled; a record retried
// stays at the head of its queue, and the records after it wait for it.
type transport struct {
	clientOpts     []kgo.Opt
	topic, group   string
	cfg            consumerConfig
	log            *slog.Logger
	retryDelay     time.Duration
	handlerTimeout time.Duration

	mu      sync.Mutex
	cl      *kgo.Client          // nil outside Run
	parts   map[int32]*partition // the partitions with records in hand
	batch   chan struct{}        // closed when the batch in hand is over; nil when none
	out     int                  // its records not yet settled nor handed back
	blocked atomic.Bool          // a rebalance waits for the batch in hand
}

var (
	_ consume.Transport        = (*transport)(nil)
	_ consume.Closer           = (*transport)(nil)
	_ consume.OutageTeller     = (*transport)(nil)
	_ consume.HandlerTimeouter = (*transport)(nil)
)

// System names the broker.
func (t *transport) System() string { return "kafka" }

// Destination is the topic.
func (t *transport) Destination() string { return t.topic }

// Outage reports an error of an unreachable cluster.
func (t *transport) Outage(err error) bool { return brokerDown(err) }

// HandlerTimeout is the default handler timeout: half the group's
// rebalance timeout (kgo.RebalanceTimeout, one minute by default), so that
// a rebalance never waits on a handler longer than the group allows.
func (t *transport) HandlerTimeout() time.Duration { return t.handlerTimeout }

// client returns the client of this Run, making it on the first Receive.
func (t *transport) client() (*kgo.Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cl != nil {
		return t.cl, nil
	}
	cl, err := kgo.NewClient(append(t.clientOpts, kgo.ConsumerGroup(t.group), kgo.ConsumeTopics(t.topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(t.revoked), kgo.OnPartitionsLost(t.lost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { t.blocked.Store(true) }))...)
	if err != nil {
		return nil, fmt.Errorf("outboxkafka: consumer client: %w", err)
	}
	t.cl, t.parts = cl, map[int32]*partition{}
	return cl, nil
}

// Close commits what was settled and closes the client of this Run,
// leaving the group; the next Run makes a new one.
func (t *transport) Close(ctx context.Context) error {
	t.endBatch()
	t.mu.Lock()
	cl := t.cl
	t.mu.Unlock()
	if cl == nil {
		return nil
	}
	err := t.commit(ctx, cl, t.inHand())
	cl.AllowRebalance()
	cl.Close()
	t.mu.Lock()
	t.cl, t.parts = nil, nil
	t.mu.Unlock()
	return err
}

// revoked hands back the partitions the group takes away (handBack), then
// commits what was settled of them: the next owner reads the rest again
// from there.
func (t *transport) revoked(ctx context.Context, cl *kgo.Client, gone map[string][]int32) {
	if err := t.commit(ctx, cl, t.handBack(ctx, gone[t.topic])); err != nil {
		t.log.Warn("outboxkafka: committing revoked partitions failed; their settled records will be handled again",
			"topic", t.topic, "group", t.group, "partitions", gone[t.topic], "error", err)
	}
}

// lost hands back the partitions no longer this member's, committing
// nothing (the group has moved on).
func (t *transport) lost(ctx context.Context, _ *kgo.Client, gone map[string][]int32) {
	t.handBack(ctx, gone[t.topic])
}

// handBack forgets the records in hand of the partitions gone, so that
// no batch takes them again, and returns their state; if a batch is in
// hand, it waits until that batch ends (what it has not started is handed
// back at once: Begin answers Wait). kgo's BlockRebalanceOnPoll holds the
// rebalance callbacks only while records it returned are in hand, not
// while the Consumer handles records that waited in a queue.
func (t *transport) handBack(ctx context.Context, gone []int32) []*partition {
	t.mu.Lock()
	var ps []*partition
	for _, n := range gone {
		if p := t.parts[n]; p != nil {
			ps = append(ps, p)
			delete(t.parts, n)
		}
	}
	batch := t.batch
	t.mu.Unlock()
	if batch != nil && len(ps) > 0 {
		t.blocked.Store(true)
		select {
		case <-batch:
		case <-ctx.Done():
		}
	}
	return ps
}

// endBatch marks the batch in hand, if any, as over.
func (t *transport) endBatch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endBatchLocked()
}

func (t *transport) endBatchLocked() {
	if t.batch != nil {
		close(t.batch)
		t.batch, t.out = nil, 0
	}
}

// handled records, with t.mu held, that m, out in the batch in hand, was
// settled or handed back; the batch is over with its last one.
func (t *transport) handled(m *message) {
	if m.out {
		m.out = false
		if t.out--; t.out == 0 {
			t.endBatchLocked()
		}
	}
}

// inHand returns the state of the partitions with records in hand.
func (t *transport) inHand() []*partition {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Values(t.parts))
}
