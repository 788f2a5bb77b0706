package tests

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
	"github.com/gormoutbox/outbox/tests/internal/servers"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// clusterEffects records what the consumers of a cluster scenario did:
// each event's runs, each key's order, and two runs of one key at once.
type clusterEffects struct {
	mu       sync.Mutex
	runs     map[string]int
	order    map[string][]int // partition key → positions handled, in order
	inflight map[string]bool
	overlaps int
}

func newClusterEffects() *clusterEffects {
	return &clusterEffects{runs: map[string]int{}, order: map[string][]int{}, inflight: map[string]bool{}}
}

// clusterPayload is the payload of a cluster scenario's events.
type clusterPayload struct{ I int }

func (c *clusterEffects) handle(_ context.Context, e *outbox.Envelope) error {
	var p clusterPayload
	if err := e.Unmarshal(&p); err != nil {
		return outbox.Permanent(err)
	}
	c.mu.Lock()
	if c.inflight[e.PartitionKey] {
		c.overlaps++
	}
	c.inflight[e.PartitionKey] = true
	c.mu.Unlock()
	time.Sleep(time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, e.PartitionKey)
	if c.runs[e.ID] == 0 {
		c.order[e.PartitionKey] = append(c.order[e.PartitionKey], p.I)
	}
	c.runs[e.ID]++
	return nil
}

// twice returns how many events were handled more than once.
func (c *clusterEffects) twice() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.runs {
		if k > 1 {
			n++
		}
	}
	return n
}

func (c *clusterEffects) handled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs)
}

// clusterEvent is event i of a scenario: one of keys partition keys,
// published to topic.
func clusterEvent(i, keys int, topic string) outbox.Event {
	return outbox.Event{ID: fmt.Sprintf("%s-%05d", topic, i), Type: "cluster.work", Topic: topic,
		PartitionKey: fmt.Sprintf("%s-k%d", topic, i%keys), Payload: clusterPayload{I: i}}
}

// emitBatch commits events from to to (excluded) in one transaction.
func emitBatch(db *gorm.DB, from, to int, mk func(i int) outbox.Event) error {
	evs := make([]outbox.Event, 0, to-from)
	for i := from; i < to; i++ {
		evs = append(evs, mk(i))
	}
	return db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, evs...) })
}

// startClusterRelay runs a relay of db through pub until t ends.
func startClusterRelay(t *testing.T, db *gorm.DB, pub relay.Publisher) {
	t.Helper()
	r, err := relay.New(db, pub, relay.WithPollInterval(50*time.Millisecond), relay.WithLease(5*time.Second),
		relay.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// startStreamConsumers runs two consumers of each stream, in key order,
// through the cluster client, until t ends.
func startClusterStreamConsumers(t *testing.T, cc *redis.ClusterClient, eff *clusterEffects, streams ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range streams {
		for i := range 2 {
			c, err := outboxredis.NewConsumer(cc, s, "g", fmt.Sprintf("c%d", i), consume.HandlerFunc(eff.handle),
				outboxredis.WithKeyOrder(), outboxredis.WithBlock(100*time.Millisecond), outboxredis.WithMinIdle(5*time.Second),
				consume.WithRetryDelay(100*time.Millisecond), consume.WithMaxRetryDelay(100*time.Millisecond),
				consume.WithLogger(testenv.Logger(t)))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if err := c.Run(ctx); err != nil {
					t.Errorf("consumer of %s: %v", s, err)
				}
			})
		}
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// startClusterAsynq runs an asynq server of the queues through the
// cluster until t ends.
func startClusterAsynq(t *testing.T, nodes []string, eff *clusterEffects, queues ...string) {
	t.Helper()
	qs := map[string]int{}
	for _, q := range queues {
		qs[q] = 1
	}
	srv := asynq.NewServer(asynq.RedisClusterClientOpt{Addrs: nodes}, asynq.Config{
		Concurrency: 4, Queues: qs, IsFailure: outboxasynq.IsFailure, RetryDelayFunc: outboxasynq.RetryDelay(nil), Logger: quietAsynqLogger{},
		TaskCheckInterval: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
	})
	mux := asynq.NewServeMux()
	mux.Handle("cluster.work", outboxasynq.Handler(consume.HandlerFunc(eff.handle), consume.WithLogger(testenv.Logger(t))))
	if err := srv.Start(mux); err != nil {
		t.Fatalf("starting the asynq server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
}

// quietAsynqLogger drops asynq's logs (its outage warnings are expected).
type quietAsynqLogger struct{}

func (quietAsynqLogger) Debug(...any) {}
func (quietAsynqLogger) Info(...any)  {}
func (quietAsynqLogger) Warn(...any)  {}
func (quietAsynqLogger) Error(...any) {}
func (quietAsynqLogger) Fatal(args ...any) {
	panic(fmt.Sprint(args...))
}

// newClusterClient returns a cluster client of c, closed when t ends.
func newClusterClient(t *testing.T, c *servers.RedisCluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DialTimeout: time.Second,
		ReadTimeout: 3 * time.Second, MaxRedirects: 8})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// The Redis adapters through a Redis Cluster of three masters and three
// replicas: a relay publishes keyed events to four streams in different
// slots (WithKeyChain) and two consumers per stream handle them in key
// order (WithKeyOrder) through a redis.ClusterClient; and a relay
// publishes them as asynq tasks to four queues through asynq's cluster
// client option, handled by an asynq server on the cluster. Every event is
// handled once; the streams' keys in order, one event of a key at a time.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	const n, keys = 400, 8
	topics := []string{"orders", "payments", "users", "carts"}
	mk := func(i int) outbox.Event { return clusterEvent(i, keys, topics[i%len(topics)]) }
	for _, transport := range []string{workload.Stream, workload.Asynq} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			cluster := servers.StartRedisCluster(t, 3)
			d := startDatabase(t, workload.SQLite)
			cc := newClusterClient(t, cluster)
			eff := newClusterEffects()
			var pub relay.Publisher
			if transport == workload.Stream {
				pub = outboxredis.NewStreamPublisher(cc, outboxredis.WithKeyChain())
				startClusterStreamConsumers(t, cc, eff, topics...)
				slots := map[int64]bool{}
				for _, s := range topics {
					slots[cc.ClusterKeySlot(t.Context(), s).Val()] = true
				}
				if len(slots) != len(topics) {
					t.Fatalf("the streams share slots: %v", slots)
				}
			} else {
				client := asynq.NewClient(asynq.RedisClusterClientOpt{Addrs: cluster.Addrs()})
				t.Cleanup(func() { _ = client.Close() })
				pub = outboxasynq.NewPublisher(client, outboxasynq.WithRetention(time.Hour))
				startClusterAsynq(t, cluster.Addrs(), eff, topics...)
			}
			startClusterRelay(t, d.db, pub)
			for from := 0; from < n; from += 50 {
				if err := emitBatch(d.db, from, from+50, mk); err != nil {
					t.Fatal(err)
				}
			}
			waitHandled(t, eff, n, 60*time.Second)
			checkClusterEffects(t, eff, n, transport == workload.Stream)
		})
	}
}

// waitHandled waits until n events were handled, or fails t.
func waitHandled(t *testing.T, eff *clusterEffects, n int, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); eff.handled() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events handled after %v", eff.handled(), n, timeout)
		}
	}
}

// checkClusterEffects fails t unless the n events were handled once each
// and, when ordered, each key's in order and one at a time.
func checkClusterEffects(t *testing.T, eff *clusterEffects, n int, ordered bool) {
	t.Helper()
	eff.mu.Lock()
	defer eff.mu.Unlock()
	for id, k := range eff.runs {
		if k != 1 {
			t.Errorf("event %s handled %d times", id, k)
		}
	}
	if len(eff.runs) != n {
		t.Errorf("%d events handled, want %d", len(eff.runs), n)
	}
	if ordered {
		checkOrderLocked(t, eff)
	}
}

// checkOrder fails t unless each key's events were handled in order and
// one at a time.
func checkOrder(t *testing.T, eff *clusterEffects) {
	t.Helper()
	eff.mu.Lock()
	defer eff.mu.Unlock()
	checkOrderLocked(t, eff)
}

func checkOrderLocked(t *testing.T, eff *clusterEffects) {
	t.Helper()
	if eff.overlaps > 0 {
		t.Errorf("%d runs started while another of their key ran", eff.overlaps)
	}
	for key, got := range eff.order {
		if !slices.IsSorted(got) {
			t.Errorf("key %s handled out of order: %v", key, got)
		}
	}
}

// A master of a Redis Cluster is cut off from its replica (the replica
// stops hearing of its writes, its clients do not notice: a partition
// between the two) for 1.5s while a relay publishes to it, then killed;
// the replica is promoted, and the old master restarted (empty) as its
// replica. Redis replicates asynchronously: what the
// master acknowledged during the partition is lost with it, events the
// relay recorded published that no consumer ever sees. The figures are
// logged (tests/GUARANTEES.md). Without WithWaitReplicas (Redis Streams,
// and asynq, which has no such option) the failover must lose events (the
// control: the scenario opens the window); with it, none.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, transport string
		wait            bool
	}{
		{"stream", workload.Stream, false},
		{"stream/wait", workload.Stream, true},
		{"asynq", workload.Asynq, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := failover{t: t, transport: c.transport, wait: c.wait}
			f.run()
			lost, eff := f.consume()
			t.Logf("SUMMARY cluster failover %s: %d events committed, %d published, %d acknowledged by the master while cut off from its replica; %d lost, %d handled twice (%d bytes of replication dropped)",
				c.name, f.committed, f.published, f.duringPartition, len(lost), eff.twice(), f.dropped)
			if c.transport == workload.Stream {
				checkOrder(t, eff)
			}
			switch {
			case c.wait && len(lost) > 0:
				t.Errorf("with WithWaitReplicas %d published events were lost in the failover: %v", len(lost), lost[:min(len(lost), 10)])
			case !c.wait && len(lost) == 0:
				t.Errorf("without WithWaitReplicas the failover lost nothing: the scenario did not open the window it tests (%d acknowledged during the partition)", f.duringPartition)
			}
		})
	}
}

// failover is one run of TestRedisClusterFailover.
type failover struct {
	t         *testing.T
	transport string
	wait      bool

	db      *gorm.DB
	cluster *servers.RedisCluster
	cc      *redis.ClusterClient
	topic   string // the stream or queue, on the master that is killed

	committed, published, duringPartition int
	dropped                               int64
}

// run sets the cluster up, publishes through the partition, the kill and
// the failover, and waits for every committed event to be published.
func (f *failover) run() {
	t := f.t
	f.cluster = servers.StartRedisCluster(t, 3)
	victim := f.cluster.Nodes[0]
	if masters, _ := f.cluster.Masters(t); !slices.Contains(masters, victim) {
		t.Fatalf("the tapped node %s is not a master", victim.Addr())
	}
	f.db = startDatabase(t, workload.SQLite).db
	f.cc = newClusterClient(t, f.cluster)
	f.topic = f.topicOn(victim)
	startClusterRelay(t, f.db, f.publisher())

	stop := make(chan struct{})
	writing := make(chan struct{})
	go func() { defer close(writing); f.write(stop) }()
	time.Sleep(2 * time.Second)
	before := f.countPublished()
	victim.Tap.Drop()
	time.Sleep(1500 * time.Millisecond)
	f.duringPartition = f.countPublished() - before
	victim.Kill(t)
	victim.Tap.Restore()
	f.cluster.WaitHealthy(t, 30*time.Second)
	// The promoted replica has no replica of its own: WithWaitReplicas
	// waits for one, as after any failover, until the old master is back.
	victim.Restart(t)
	f.cluster.WaitHealthy(t, 30*time.Second)
	time.Sleep(2 * time.Second)
	close(stop)
	<-writing
	f.dropped, _ = victim.Tap.Dropped()
	for deadline := time.Now().Add(60 * time.Second); f.countPublished() < f.committed; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d committed events published 60s after the failover", f.countPublished(), f.committed)
		}
	}
	f.published = f.countPublished()
}

// topicOn returns a stream (or queue) name whose slot node serves.
func (f *failover) topicOn(node *servers.RedisNode) string {
	for i := range 1000 {
		name := fmt.Sprintf("fo-%d", i)
		if m, err := f.cc.MasterForKey(f.t.Context(), name); err == nil && m.Options().Addr == node.Addr() {
			return name
		}
	}
	f.t.Fatalf("no name of the first 1000 maps to master %s", node.Addr())
	return ""
}

// publisher returns the relay's publisher of the scenario.
func (f *failover) publisher() relay.Publisher {
	if f.transport == workload.Asynq {
		client := asynq.NewClient(asynq.RedisClusterClientOpt{Addrs: f.cluster.Addrs(), DialTimeout: time.Second})
		f.t.Cleanup(func() { _ = client.Close() })
		return outboxasynq.NewPublisher(client, outboxasynq.WithRetention(time.Hour))
	}
	opts := []outboxredis.Option{outboxredis.WithKeyChain()}
	if f.wait {
		opts = append(opts, outboxredis.WithWaitReplicas(1, 500*time.Millisecond))
	}
	return outboxredis.NewStreamPublisher(f.cc, opts...)
}

// write commits 10 events every 20ms until stop.
func (f *failover) write(stop <-chan struct{}) {
	mk := func(i int) outbox.Event { return clusterEvent(i, 8, f.topic) }
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		if err := emitBatch(f.db, f.committed, f.committed+10, mk); err != nil {
			f.t.Errorf("writing events: %v", err)
			return
		}
		f.committed += 10
	}
}

func (f *failover) countPublished() int {
	var n int64
	if err := f.db.Model(&outbox.OutboxEvent{}).Where("status = ?", outbox.StatusPublished).Count(&n).Error; err != nil {
		f.t.Fatal(err)
	}
	return int(n)
}

// consume consumes what the cluster holds after the failover and returns
// the published events no consumer saw.
func (f *failover) consume() ([]string, *clusterEffects) {
	t := f.t
	eff := newClusterEffects()
	if f.transport == workload.Asynq {
		startClusterAsynq(t, f.cluster.Addrs(), eff, f.topic)
	} else {
		startClusterStreamConsumers(t, f.cc, eff, f.topic)
	}
	// Until every event is handled, or none more for 3s.
	last, since := -1, time.Now()
	for eff.handled() < f.published && time.Since(since) < 3*time.Second {
		if h := eff.handled(); h != last {
			last, since = h, time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ids []string
	if err := f.db.Model(&outbox.OutboxEvent{}).Where("status = ?", outbox.StatusPublished).Order("id").Pluck("event_id", &ids).Error; err != nil {
		t.Fatal(err)
	}
	eff.mu.Lock()
	defer eff.mu.Unlock()
	var lost []string
	for _, id := range ids {
		if eff.runs[id] == 0 {
			lost = append(lost, id)
		}
	}
	return lost, eff
}
