package outboxkafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/optionerr"
	"github.com/gormoutbox/outbox/relay"
)

// Publisher publishes outbox events to Kafka through a franz-go client,
// one record per event. It implements relay.Publisher, relay.BatchPublisher
// (the relay hands it a whole batch, which it produces at once before it
// awaits the records' promises), relay.Validator and relay.Describer. It
// is safe for concurrent use.
//
// Each record goes to the event's topic (see Topic), keyed by its
// PartitionKey, else its AggregateID, so that a key's events land on one
// partition in commit order; its value and headers follow the Layout.
type Publisher struct {
	cl          *kgo.Client
	cfg         config
	batchMax    func(topic string) int32
	maxBuffered int64
}

var (
	_ relay.BatchPublisher = (*Publisher)(nil)
	_ relay.Validator      = (*Publisher)(nil)
	_ relay.Describer      = (*Publisher)(nil)
)

// NewPublisher returns a Publisher that produces through cl. It returns
// an error wrapping ErrInvalidOption, and no Publisher, for a nil cl, a bad
// option, or a client that could reorder a key's events or never send
// them: one with a transactional id, manual flushing, a default topic for
// every record (kgo.DefaultProduceTopicAlways), a partitioner that does
// not keep a key on one partition, or idempotent writes disabled with
// more than one produce request in flight. It does not talk to the
// brokers.
func NewPublisher(cl *kgo.Client, opts ...Option) (*Publisher, error) {
	cfg := config{PublisherConfig: adapterkit.NewPublisherConfig(ErrInvalidOption), ackTimeout: DefaultAckTimeout}
	optionerr.Apply(&cfg, &cfg.Errors, opts)
	p := &Publisher{cl: cl, cfg: cfg}
	if cl == nil {
		p.cfg.Fail("nil client")
	} else {
		p.checkClient()
	}
	if err := p.cfg.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// checkClient records what in the client's settings the Publisher cannot
// work with, and reads its size limits.
func (p *Publisher) checkClient() {
	cl := p.cl
	if txn, _ := cl.OptValues(kgo.TransactionalID)[1].(bool); txn {
		p.cfg.Fail("the client is transactional (kgo.TransactionalID): its records fail outside a transaction")
	}
	if optBool(cl, kgo.ManualFlushing) {
		p.cfg.Fail("the client flushes manually (kgo.ManualFlushing): its records would wait for a Flush")
	}
	if optBool(cl, kgo.DefaultProduceTopicAlways) {
		p.cfg.Fail("the client sends every record to its default topic (kgo.DefaultProduceTopicAlways)")
	}
	if inflight, _ := cl.OptValue(kgo.MaxProduceRequestsInflightPerBroker).(int); optBool(cl, kgo.DisableIdempotentWrite) && inflight > 1 {
		p.cfg.Fail("idempotent writes are disabled with more than one produce request in flight: retries could reorder a key's events")
	}
	if part, ok := cl.OptValue(kgo.RecordPartitioner).(kgo.Partitioner); ok && part != nil &&
		!part.ForTopic("outbox").RequiresConsistency(&kgo.Record{Key: []byte("key")}) {
		p.cfg.Fail("the client's partitioner (kgo.RecordPartitioner) does not keep a key on one partition: a key's events could be reordered")
	}
	p.batchMax, _ = cl.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32)
	if p.batchMax == nil {
		p.cfg.Fail("cannot read the client's kgo.ProducerBatchMaxBytes")
	}
	p.maxBuffered, _ = cl.OptValue(kgo.MaxBufferedBytes).(int64)
}

// optBool returns the client's boolean option opt.
func optBool(cl *kgo.Client, opt any) bool {
	v, _ := cl.OptValue(opt).(bool)
	return v
}

// Validate reports whether the Publisher was made by NewPublisher (which
// checked its options and client); relay.New calls it.
func (p *Publisher) Validate() error {
	if p == nil || p.cl == nil {
		return fmt.Errorf("%w: Publisher not made by NewPublisher", ErrInvalidOption)
	}
	return nil
}

// Publish publishes e and waits for the broker's acknowledgement; it is
// PublishBatch of one event.
func (p *Publisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	return p.PublishBatch(ctx, []*outbox.Envelope{e})[0]
}

// PublishBatch produces a record for every event of es at once, then
// awaits each record's promise, until the ack timeout (WithAckTimeout) or
// the end of ctx, and returns one result per event, in order. A published
// event's topic, partition and offset are its receipt
// (relay.SetReceipt: "topic/partition@offset", in the relay's attempt
// log) and go into the batch's debug log line.
//
// Errors name the event and the topic and are classified for the relay:
//
//   - outbox.Unavailable (no attempt spent): a retriable broker error
//     (NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
//     …) once the client's own retries are spent, no acknowledgement in
//     time, the broker unreachable, the client closed or its buffer full.
//   - outbox.Permanent: ErrInvalidMessage, ErrNoTopic, ErrTooLarge (checked
//     before sending against the producer's limits, or MESSAGE_TOO_LARGE
//     for the record alone), ErrRejected (the topic does not exist once
//     the unknown-topic retries are spent, TOPIC_AUTHORIZATION_FAILED, an
//     invalid topic, INVALID_RECORD for the record alone).
//   - any other error as it is: the relay retries it with backoff.
//
// The broker rejects a whole record batch for one record too large or
// invalid, and the client fails the partition's other records with it:
// the records of such a rejection are produced again in rounds of at most
// one per partition, so that only a record the broker refuses while alone
// in its partition fails.
func (p *Publisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	if err := p.Validate(); err != nil {
		return slices.Repeat([]error{err}, len(es))
	}
	errs := make([]error, len(es))
	b := &batch{es: es, recs: make([]*kgo.Record, len(es)), produced: make([]*kgo.Record, len(es)),
		partition: make([]int32, len(es)), errs: errs}
	began := time.Now()
	var todo []int
	for i, e := range es {
		if b.recs[i], errs[i] = p.record(e); errs[i] == nil {
			todo = append(todo, i)
		}
	}
	again := p.produce(ctx, b, todo)
	rounds := 0
	for ; len(again) > 0 && ctx.Err() == nil; rounds++ {
		round, rest := onePerPartition(b, again)
		again = append(p.produce(ctx, b, round), rest...)
	}
	for _, i := range again {
		errs[i] = outbox.Unavailable(fmt.Errorf("outboxkafka: event %s (%s): not produced again before the deadline: %w", es[i].ID, es[i].Type, errs[i]))
	}
	p.logBatch(ctx, b, rounds, time.Since(began))
	return errs
}

// batch is one PublishBatch call: its events, their records as built (each
// try produces a copy), the records the broker wrote (nil until then),
// the partition each record last went to, and their results.
type batch struct {
	es        []*outbox.Envelope
	recs      []*kgo.Record
	produced  []*kgo.Record
	partition []int32
	errs      []error
}

// onePerPartition splits todo into a round of at most one record per
// partition (where each went last) and the rest.
func onePerPartition(b *batch, todo []int) (round, rest []int) {
	taken := map[int32]bool{}
	for _, i := range todo {
		if taken[b.partition[i]] {
			rest = append(rest, i)
		} else {
			taken[b.partition[i]] = true
			round = append(round, i)
		}
	}
	return round, rest
}

// result is a produce promise's answer for the event at index i.
type result struct {
	i   int
	rec *kgo.Record
	err error
}

// produce produces the records of the events at the indexes todo, awaits
// their promises and sets their results; it returns the indexes of the
// records that a rejection of their partition's batch failed while
// another record of the round shared the partition, to produce again.
func (p *Publisher) produce(ctx context.Context, b *batch, todo []int) []int {
	if len(todo) == 0 {
		return nil
	}
	got := p.await(ctx, b, todo)
	perPartition := map[int32]int{}
	for _, res := range got {
		perPartition[res.rec.Partition]++
	}
	var again []int
	for _, res := range got {
		i := res.i
		b.partition[i] = res.rec.Partition
		switch {
		case res.err == nil:
			b.produced[i], b.errs[i] = res.rec, nil
			relay.SetReceipt(ctx, b.es[i], receipt(res.rec))
		case recordRejection(res.err) && perPartition[res.rec.Partition] > 1:
			b.errs[i] = res.err
			again = append(again, i)
		default:
			b.errs[i] = classify(ctx, b.es[i], res.rec.Topic, res.err)
		}
	}
	return again
}

// await produces the records of todo and returns the promises' results
// that came before the ack timeout or the end of ctx; it fails the others
// as not acknowledged in time.
func (p *Publisher) await(ctx context.Context, b *batch, todo []int) []result {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if p.cfg.ackTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, p.cfg.ackTimeout)
	}
	// Records not yet sent when the wait ends are failed by the client
	// rather than sent late.
	defer cancel()
	results := make(chan result, len(todo)) // never blocks a promise
	for _, i := range todo {
		built := b.recs[i]
		r := &kgo.Record{Topic: built.Topic, Key: built.Key, Value: built.Value, Headers: built.Headers}
		p.cl.Produce(actx, r, func(r *kgo.Record, err error) { results <- result{i, r, err} })
	}
	got := make([]result, 0, len(todo))
	for len(got) < len(todo) {
		select {
		case res := <-results:
			got = append(got, res)
		case <-actx.Done():
			arrived := make(map[int]bool, len(got))
			for _, res := range got {
				arrived[res.i] = true
			}
			for _, i := range todo {
				if !arrived[i] {
					b.errs[i] = outbox.Unavailable(fmt.Errorf("outboxkafka: event %s (%s) to topic %s: no acknowledgement in time: %w",
						b.es[i].ID, b.es[i].Type, b.recs[i].Topic, actx.Err()))
				}
			}
			return got
		}
	}
	return got
}

// receipt is where r went: "topic/partition@offset".
func receipt(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "@" + strconv.FormatInt(r.Offset, 10)
}

// Describe says where the Publisher publishes, for relay heartbeats and
// "outbox stats" (it implements relay.Describer): the topics, the layout
// and the seed brokers.
func (p *Publisher) Describe() string {
	if p.Validate() != nil {
		return "kafka (invalid publisher)"
	}
	d := "kafka topic <Topic>"
	switch {
	case p.cfg.topicFunc != nil:
		d = "kafka topic <chosen by WithTopicFunc>"
	case p.cfg.layout == Debezium:
		d = "kafka topic outbox.event.<AggregateType>"
	}
	if p.cfg.topic != "" {
		d += " (default " + p.cfg.topic + ")"
	}
	d += ", " + p.cfg.layout.String() + " layout"
	if seeds, _ := p.cl.OptValue(kgo.SeedBrokers).([]string); len(seeds) > 0 {
		d += " on " + strings.Join(seeds, ",")
	}
	return d
}
