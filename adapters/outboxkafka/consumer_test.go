package outboxkafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// backlog is n keyed events (emitKeyed) published to a new topic of 6
// partitions, with the database of their consumers' effects.
type backlog struct {
	t     *testing.T
	c     *cluster
	db    *gorm.DB
	store *idempotency.Store
	topic string
	n     int
	probe *probe
}

func newBacklog(t *testing.T, c *cluster, n int) *backlog {
	t.Helper()
	db, store := outboxDB(t, testenv.SQLite)
	b := &backlog{t: t, c: c, db: db, store: store, topic: c.topic(t, 6, nil), n: n,
		probe: &probe{runs: map[string]int{}, done: map[string][]int{}, running: map[string]string{}}}
	emitKeyed(t, db, n, b.topic)
	stop := startRelay(t, newRelay(t, db, newPublisher(t, c.client(t, kgo.ProducerLinger(0))), relay.WithBatchSize(100)))
	eventually(t, 60*time.Second, "the backlog published", func() bool { return countStatus(t, db, outbox.StatusPublished) == int64(n) })
	stop()
	return b
}

// consumer starts a consumer of the backlog's topic in group "g", run
// until the test ends or stop is called.
func (b *backlog) consumer(name string, hold time.Duration, opts ...consume.Option) (stop func()) {
	b.t.Helper()
	cons, err := outboxkafka.NewConsumer(consumerOpts(b.c, kgo.ClientID(name)), b.topic, "g", b.probe.handler(b.store, hold),
		append([]consume.Option{consume.WithLogger(testLogger(b.t)), consume.WithRetryDelay(20 * time.Millisecond)}, opts...)...)
	must(b.t, err)
	return runConsumer(b.t, cons)
}

// runConsumer runs c until t ends or stop is called.
func runConsumer(t testing.TB, c *consume.Consumer) (stop func()) {
	return runUntil(t, "consumer", c.Run)
}

// effects returns how many events took effect.
func (b *backlog) effects() int {
	var n int64
	must(b.t, b.db.Model(&effect{}).Distinct("event_id").Count(&n).Error)
	return int(n)
}

// waitEffects waits until at least n events took effect.
func (b *backlog) waitEffects(n int) {
	b.t.Helper()
	eventually(b.t, 90*time.Second, fmt.Sprintf("%d effects", n), func() bool { return b.effects() >= n })
}

// check checks that every event took effect once, each key's in commit
// order, never two of a key at once; with once, that each ran once.
func (b *backlog) check(once bool) {
	t := b.t
	t.Helper()
	b.waitEffects(b.n)
	var rows []struct {
		EventID string
		N       int
	}
	must(t, b.db.Model(&effect{}).Select("event_id, COUNT(*) AS n").Group("event_id").Scan(&rows).Error)
	for _, r := range rows {
		if r.N != 1 {
			t.Errorf("event %s took effect %d times", r.EventID, r.N)
		}
	}
	p := b.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, seqs := range p.done {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				t.Errorf("key %s: event %d took effect after event %d", k, seqs[i], seqs[i-1])
				break
			}
		}
	}
	for _, o := range p.overlaps {
		t.Error(o)
	}
	again := 0
	for _, n := range p.runs {
		if n > 1 {
			again++
		}
	}
	t.Logf("%d events, %d of them handled more than once", b.n, again)
	if once && again > 0 {
		t.Errorf("%d events handled more than once: the rebalances did not hand the partitions over gracefully", again)
	}
}

// probe is a handler that records, per key, the order of the effects,
// and any two runs of a key at once, and per event its runs.
type probe struct {
	mu       sync.Mutex
	runs     map[string]int
	done     map[string][]int
	running  map[string]string
	overlaps []string
	fail     func(e *outbox.Envelope) error
}

// handler writes an effect per event with store (IdempotentTx), each run
// taking hold.
func (p *probe) handler(store *idempotency.Store, hold time.Duration) consume.Handler {
	inner := consume.IdempotentTx(store, "probe", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		var v struct{ I int }
		if err := e.Unmarshal(&v); err != nil {
			return outbox.Permanent(err)
		}
		if err := tx.Create(&effect{EventID: e.ID}).Error; err != nil {
			return err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.done[e.PartitionKey] = append(p.done[e.PartitionKey], v.I)
		return nil
	})
	return consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		p.mu.Lock()
		if other, ok := p.running[e.PartitionKey]; ok {
			p.overlaps = append(p.overlaps, fmt.Sprintf("key %s: %s ran while %s ran", e.PartitionKey, e.ID, other))
		}
		p.running[e.PartitionKey] = e.ID
		p.runs[e.ID]++
		fail := p.fail
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.running, e.PartitionKey)
			p.mu.Unlock()
		}()
		time.Sleep(hold)
		if fail != nil {
			if err := fail(e); err != nil {
				return err
			}
		}
		return inner.Handle(ctx, e)
	})
}

// A consumer group's members come and go while a keyed backlog is
// consumed: a second consumer joins, a third, then the first leaves. Each
// rebalance waits for the batch in hand (what has not started is handed
// back) and commits what was done: every event is handled once, each key's
// in commit order, never two of a key at once.
func TestConsumerRebalance(t *testing.T) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		const n = 900
		b := newBacklog(t, c, n)
		stop1 := b.consumer("c1", 4*time.Millisecond, consume.WithConcurrency(2))
		b.waitEffects(n / 5)
		b.consumer("c2", 4*time.Millisecond, consume.WithConcurrency(2))
		b.waitEffects(2 * n / 5)
		b.consumer("c3", 4*time.Millisecond, consume.WithConcurrency(2))
		b.waitEffects(3 * n / 5)
		stop1()
		if b.effects() == n {
			t.Fatal("the backlog was consumed before the first consumer left: the test tested nothing")
		}
		b.check(true)
	})
}

// Partition leaders move, the group's coordinator goes away with its
// broker, and fetches and offset commits fail for a while, under two
// consumers of a keyed backlog: every event takes effect once, each key's
// in commit order, nothing is dead.
func TestConsumerFaults(t *testing.T) {
	testenv.LongFault(t)
	const n = 1200
	c := newFake(t)
	b := newBacklog(t, c, n)
	var dead int
	var mu sync.Mutex
	onDead := consume.WithOnDead(func(context.Context, consume.DeadLetter) { mu.Lock(); dead++; mu.Unlock() })
	b.consumer("c1", 2*time.Millisecond, consume.WithConcurrency(3), onDead)
	b.consumer("c2", 2*time.Millisecond, consume.WithConcurrency(3), onDead)
	b.waitEffects(n / 10)
	c.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.NotLeaderForPartition, Count: 6},
		kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.RequestTimedOut, Count: 3})
	for i := range 6 {
		c.fake.ShufflePartitionLeaders()
		must(t, c.fake.MoveTopicPartition(b.topic, int32(i), int32(i%3)))
		time.Sleep(30 * time.Millisecond)
	}
	c.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.NotCoordinator, Count: 3})
	if b.effects() == n {
		t.Fatal("the backlog was consumed before the coordinator left: the test tested nothing")
	}
	must(t, c.fake.RemoveNode(c.fake.CoordinatorFor("g")))
	b.check(false)
	mu.Lock()
	defer mu.Unlock()
	if dead != 0 {
		t.Errorf("%d records dead", dead)
	}
}

// A record of the Binary layout is read back as the event published.
func TestConsumerReadsBinaryLayout(t *testing.T) {
	c := newFake(t)
	topic := c.topic(t, 1, nil)
	want := envelope("ev-bin", topic, "k")
	want.Version, want.TenantID, want.Headers["x-extra"] = 3, "t1", "yes"
	publishAll(t, newPublisher(t, c.client(t), outboxkafka.WithLayout(outboxkafka.Binary), outboxkafka.WithSource("shop")), want)
	got := make(chan *outbox.Envelope, 1)
	cons, err := outboxkafka.NewConsumer(consumerOpts(c), topic, "g", consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		d, _ := consume.DeliveryFrom(ctx)
		if r, ok := d.Details.(outboxkafka.Record); !ok || r.Topic != topic || string(r.Key) != "k" || r.Group != "g" {
			t.Errorf("Details %#v", d.Details)
		}
		got <- e
		return nil
	}), consume.WithLogger(testLogger(t)))
	must(t, err)
	runConsumer(t, cons)
	select {
	case e := <-got:
		want.Source = "shop"
		if fmt.Sprintf("%+v", *e) != fmt.Sprintf("%+v", *want) {
			t.Errorf("read\n%+v\nwant\n%+v", *e, *want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing consumed")
	}
}

// NewConsumer refuses bad arguments and client options it cannot work
// with, each error wrapping consume.ErrInvalidOption.
func TestNewConsumerRefuses(t *testing.T) {
	h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	seeds := kgo.SeedBrokers("127.0.0.1:1")
	for name, tc := range map[string]struct {
		client       []kgo.Opt
		topic, group string
		h            consume.Handler
		opts         []consume.Option
	}{
		"bad topic":         {[]kgo.Opt{seeds}, "a topic", "g", h, nil},
		"no group":          {[]kgo.Opt{seeds}, "t", "", h, nil},
		"nil handler":       {[]kgo.Opt{seeds}, "t", "g", nil, nil},
		"regex":             {[]kgo.Opt{seeds, kgo.ConsumeRegex()}, "t", "g", h, nil},
		"partitions":        {[]kgo.Opt{seeds, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset()}})}, "t", "g", h, nil},
		"transactional":     {[]kgo.Opt{seeds, kgo.TransactionalID("x")}, "t", "g", h, nil},
		"max poll":          {[]kgo.Opt{seeds}, "t", "g", h, []consume.Option{outboxkafka.WithMaxPollRecords(0)}},
		"dead-letter topic": {[]kgo.Opt{seeds}, "t", "g", h, []consume.Option{outboxkafka.WithDeadLetterTopic("")}},
		"another's option":  {[]kgo.Opt{seeds}, "t", "g", h, []consume.Option{consume.TransportOption("x.WithY", func(*int) error { return nil })}},
	} {
		c, err := outboxkafka.NewConsumer(tc.client, tc.topic, tc.group, tc.h, tc.opts...)
		if c != nil || !errors.Is(err, consume.ErrInvalidOption) {
			t.Errorf("%s: %v, %v; want ErrInvalidOption", name, c, err)
		}
	}
	if _, err := outboxkafka.NewConsumer([]kgo.Opt{seeds}, "t", "g", h); err != nil {
		t.Errorf("good arguments: %v", err)
	}
}

// The dead-letter topic is read by page, partition by partition, each
// record with its reason and source; replayed records go back to their
// partition, are consumed again, and are left out of the next reading;
// replaying them again does nothing.
func TestDeadLettersReadAndReplay(t *testing.T) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		b := newBacklog(t, c, 40)
		deadTopic := c.topicNamed(t, b.topic+".dead", 2, nil)
		var healed atomic.Bool
		b.probe.fail = func(e *outbox.Envelope) error {
			if !healed.Load() && strings.HasSuffix(e.ID, "5") {
				return outbox.Permanent(errors.New("refused for good"))
			}
			return nil
		}
		b.consumer("c1", 0, outboxkafka.WithDeadLetterTopic(deadTopic))
		b.waitEffects(36)
		dl := outboxkafka.NewDeadLetters(c.clientOpts(), deadTopic)
		var all []consume.DeadMessage
		eventually(t, 30*time.Second, "4 dead letters", func() bool {
			page, _, err := dl.DeadLetters(t.Context(), "", 100)
			must(t, err)
			all = page
			return len(page) == 4
		})
		first, next, err := dl.DeadLetters(t.Context(), "", 3)
		must(t, err)
		rest, end, err := dl.DeadLetters(t.Context(), next, 3)
		must(t, err)
		if len(first) != 3 || len(rest) != 1 || end != "" || deadIDs(append(first, rest...)) != deadIDs(all) {
			t.Fatalf("pages %v (next %q) and %v (next %q), want the 4 of %v", first, next, rest, end, all)
		}
		for _, m := range all {
			if m.Envelope == nil || !strings.HasSuffix(m.Envelope.ID, "5") || !strings.Contains(m.Reason, "refused for good") ||
				m.Source != b.topic+" (group g)" || m.Deliveries != 1 || m.DeadAt.IsZero() {
				t.Errorf("dead message %+v", m)
			}
		}
		healed.Store(true)
		n, err := dl.ReplayDead(t.Context(), all[0].ID, all[1].ID, "9:99", "bad")
		must(t, err)
		if n != 2 {
			t.Errorf("replayed %d, want 2", n)
		}
		b.waitEffects(38)
		left, _, err := dl.DeadLetters(t.Context(), "", 100)
		must(t, err)
		if deadIDs(left) != deadIDs(all[2:]) {
			t.Errorf("after the replay: %v, want %v", left, all[2:])
		}
		if n, err := dl.ReplayDead(t.Context(), all[0].ID); n != 0 || err != nil {
			t.Errorf("replaying again: %d, %v", n, err)
		}
		replayed := 0
		for _, r := range c.records(t, b.topic) {
			if from := headerOf(r, outboxkafka.HeaderReplayedFrom); from != "" {
				replayed++
				if !strings.HasPrefix(from, deadTopic+"/") || headerOf(r, outboxkafka.HeaderDeadReason) != "" {
					t.Errorf("replayed record's headers %v", r.Headers)
				}
			}
		}
		if replayed != 2 {
			t.Errorf("%d replayed records in the topic, want 2", replayed)
		}
	})
}

// deadIDs lists the ids and event ids of ms.
func deadIDs(ms []consume.DeadMessage) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.ID+"="+m.Envelope.ID)
	}
	return strings.Join(s, " ")
}

func headerOf(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// The dead-letter topic refuses records for a while: a dead record is
// not committed (nor any record after it in its partition), though the
// others are handled (a dead record does not hold its key); once the topic
// takes records again, each dead record is in it once and every offset is
// committed.
func TestDeadLetterTopicDown(t *testing.T) {
	c := newFake(t)
	b := newBacklog(t, c, 48)
	deadTopic := c.topicNamed(t, b.topic+".dead", 1, nil)
	b.probe.fail = func(e *outbox.Envelope) error {
		if strings.HasSuffix(e.ID, "5") {
			return outbox.Permanent(errors.New("refused for good"))
		}
		return nil
	}
	down := c.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: deadTopic, Err: kerr.TopicAuthorizationFailed, Count: -1})
	b.consumer("c1", 0, outboxkafka.WithDeadLetterTopic(deadTopic))
	b.n = 48 - 5 // ev-000005, 15, 25, 35 and 45 are dead
	b.waitEffects(b.n)
	must(t, down.Wait(t.Context(), 10))
	dl := outboxkafka.NewDeadLetters(c.clientOpts(), deadTopic)
	if page, _, err := dl.DeadLetters(t.Context(), "", 10); err != nil || len(page) != 0 {
		t.Fatalf("dead letters while the topic refuses records: %v, %v", page, err)
	}
	firstDead := map[int32]int64{}
	for _, r := range c.records(t, b.topic) {
		if e, err := outbox.DecodeEnvelope(r.Value); err == nil && strings.HasSuffix(e.ID, "5") {
			if o, ok := firstDead[r.Partition]; !ok || r.Offset < o {
				firstDead[r.Partition] = r.Offset
			}
		}
	}
	adm := kadm.NewClient(c.client(t))
	for p, o := range firstDead {
		offs, err := adm.FetchOffsets(t.Context(), "g")
		must(t, err)
		if got, _ := offs.Lookup(b.topic, p); got.At > o {
			t.Errorf("partition %d committed at %d, past its dead record at %d that is not dead-lettered yet", p, got.At, o)
		}
	}
	down.Remove()
	b.check(false)
	eventually(t, 30*time.Second, "5 dead letters and every offset committed", func() bool {
		page, _, err := dl.DeadLetters(t.Context(), "", 100)
		must(t, err)
		offs, err := adm.FetchOffsets(t.Context(), "g")
		must(t, err)
		ends, err := adm.ListEndOffsets(t.Context(), b.topic)
		must(t, err)
		all := true
		ends.Each(func(e kadm.ListedOffset) {
			got, _ := offs.Lookup(b.topic, e.Partition)
			all = all && got.At == e.Offset
		})
		return len(page) == 5 && all
	})
}
