package outboxkafka_test

// The Kafka the tests run against, kept apart from the checks so that a
// shared adapter conformance suite can take both over: a cluster gives
// topics, clients and what a topic holds; the checks (checks_test.go)
// know nothing of Kafka beyond the records they are given.

import (
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// brokersEnv points the tests at a real Kafka cluster too: its seed
// brokers, comma-separated. kfake tests always run.
const brokersEnv = "OUTBOX_KAFKA_BROKERS"

// cluster is a Kafka cluster the tests use: a kfake cluster of 3 brokers
// that the test started, or the real one of OUTBOX_KAFKA_BROKERS.
type cluster struct {
	name    string
	fake    *kfake.Cluster // nil for the real cluster
	brokers []string
}

// newFake starts a kfake cluster of 3 brokers, closed when t ends.
func newFake(t testing.TB, opts ...kfake.Opt) *cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	must(t, err)
	t.Cleanup(c.Close)
	return &cluster{name: "kfake", fake: c, brokers: c.ListenAddrs()}
}

// realCluster returns the cluster of OUTBOX_KAFKA_BROKERS, or skips t
// naming the variable. There is no Kafka in CI: OUTBOX_REQUIRE_SERVICES
// does not make this one required.
func realCluster(t testing.TB) *cluster {
	t.Helper()
	v := os.Getenv(brokersEnv)
	if v == "" {
		t.Skipf("%s is not set; set it (e.g. %s=127.0.0.1:9092) to run this test against a real Kafka too", brokersEnv, brokersEnv)
	}
	return &cluster{name: "kafka", brokers: strings.Split(v, ",")}
}

// eachCluster runs fn on a new kfake cluster, and on the real cluster of
// OUTBOX_KAFKA_BROKERS (a subtest skipped without it).
func eachCluster(t *testing.T, fn func(t *testing.T, c *cluster)) {
	t.Run("kfake", func(t *testing.T) { fn(t, newFake(t)) })
	t.Run("kafka", func(t *testing.T) { fn(t, realCluster(t)) })
}

// seeds returns the cluster's brokers (of a kfake cluster, those it has
// now).
func (c *cluster) seeds() []string {
	if c.fake != nil {
		return c.fake.ListenAddrs()
	}
	return c.brokers
}

// onEach runs fn per cluster and per dialect.
func onEach(t *testing.T, fn func(t *testing.T, c *cluster, dialect string)) {
	eachCluster(t, func(t *testing.T, c *cluster) {
		for _, d := range testenv.Dialects {
			t.Run(d, func(t *testing.T) { fn(t, c, d) })
		}
	})
}

// clientOpts are the settings of the tests' clients: the cluster's seeds,
// and a client that notices moved leaders and missing topics quickly.
func (c *cluster) clientOpts(opts ...kgo.Opt) []kgo.Opt {
	base := []kgo.Opt{
		kgo.SeedBrokers(c.seeds()...),
		kgo.MetadataMinAge(20 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
	}
	if lvl, ok := map[string]kgo.LogLevel{"debug": kgo.LogLevelDebug, "info": kgo.LogLevelInfo}[os.Getenv("OUTBOX_KAFKA_LOG")]; ok {
		base = append(base, kgo.WithLogger(kgo.BasicLogger(os.Stderr, lvl, nil)))
	}
	return append(base, opts...)
}

// client returns a client of the cluster with the tests' settings, closed
// when t ends.
func (c *cluster) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(c.clientOpts(opts...)...)
	must(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// topic creates a topic with a unique name, partitions and configs,
// deleted when t ends.
func (c *cluster) topic(t testing.TB, partitions int32, configs map[string]*string) string {
	t.Helper()
	return c.topicNamed(t, testenv.Name("okafka"), partitions, configs)
}

// topicNamed creates the topic name, deleted when t ends (on a real
// cluster; a kfake one is closed).
func (c *cluster) topicNamed(t testing.TB, name string, partitions int32, configs map[string]*string) string {
	t.Helper()
	adm := kadm.NewClient(c.client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := adm.CreateTopic(ctx, partitions, -1, configs, name)
	must(t, err)
	if c.fake != nil {
		return name // the cluster goes with the test
	}
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(ctx, name)
	})
	return name
}

// records returns every record topic holds, partition by partition in
// offset order: it reads from the start until each partition's end offset
// (as the cluster lists it now).
func (c *cluster) records(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(c.client(t)).ListEndOffsets(ctx, topic)
	must(t, err)
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := c.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: still waiting for partitions %v: %v", topic, left, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return byPartition(out)
}

// byPartition orders records by partition, then offset.
func byPartition(rs []*kgo.Record) []*kgo.Record {
	parts := map[int32][]*kgo.Record{}
	var order []int32
	for _, r := range rs {
		if _, ok := parts[r.Partition]; !ok {
			order = append(order, r.Partition)
		}
		parts[r.Partition] = append(parts[r.Partition], r)
	}
	var out []*kgo.Record
	slices.Sort(order)
	for _, p := range order {
		out = append(out, parts[p]...)
	}
	return out
}

// produceFault is an error the kfake cluster answers produce requests
// with (failProduce).
type produceFault struct {
	mu      sync.Mutex
	left    int // requests still to fail; < 0: until Stop
	stopped bool
	done    chan struct{} // closed when it will fail no more requests
}

// Stop ends the fault.
func (f *produceFault) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finish()
}

func (f *produceFault) finish() {
	if !f.stopped {
		f.stopped = true
		close(f.done)
	}
}

// Done is closed once the fault fails no more requests.
func (f *produceFault) Done() <-chan struct{} { return f.done }

// failProduce makes the kfake cluster answer the next n produce requests
// (every one with n < 0, until Stop) with the error for every partition,
// writing nothing; kgo then retries them itself, or fails their records.
// The fault stops when t ends.
func (c *cluster) failProduce(t testing.TB, e *kerr.Error, n int) *produceFault {
	t.Helper()
	if c.fake == nil {
		t.Fatal("failProduce needs a kfake cluster")
	}
	f := &produceFault{left: n, done: make(chan struct{})}
	t.Cleanup(f.Stop)
	c.fake.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.stopped {
			c.fake.DropControl()
			return nil, nil, false
		}
		if f.left > 0 {
			if f.left--; f.left == 0 {
				f.finish()
			}
		}
		c.fake.KeepControl()
		return produceError(kreq.(*kmsg.ProduceRequest), e.Code), nil, true
	})
	return f
}

// produceError answers req with code for each of its partitions.
func produceError(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// network is a dialer whose connections can be cut: Cut closes them all
// and refuses new ones until Restore, as a network partition between the
// client and every broker would.
type network struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (n *network) dial(ctx context.Context, network, host string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, host)
	if err == nil {
		n.conns = append(n.conns, conn)
	}
	return conn, err
}

// Cut closes every connection and refuses new ones.
func (n *network) Cut() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = true
	for _, c := range n.conns {
		_ = c.Close()
	}
	n.conns = nil
}

// Restore lets connections be made again.
func (n *network) Restore() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = false
}
