package outboxasynq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const benchEvents = 50000

func benchEvent(i int) outbox.Event {
	return outbox.Event{Type: "bench.event", Payload: map[string]any{"i": i, "customer": "customer-0042", "total": 1999, "currency": "EUR"}}
}

// BenchmarkRelayToAsynq measures events per second relayed from
// PostgreSQL into asynq (50,000 events per run), against the raw limit:
// the same Enqueue calls (same payload size, options and TaskIDs) made
// directly in a loop ("raw"), and from as many goroutines as the relay's
// default concurrency ("raw10").
//
//	go test -run '^$' -bench . ./adapters/outboxasynq
//
// Sub-benchmarks vary the relay: default options, bigger batches, several
// relays at once.
func BenchmarkRelayToAsynq(b *testing.B) {
	addr := testenv.RedisAddr(b)
	client := newClient(b, addr)

	db, _ := setupDB(b, testenv.Open(b, testenv.Postgres))
	emitN(b, db, benchEvents, benchEvent)
	tasks := rawTasks(b, db)
	q := testenv.Name("oa-bench-raw")
	raw := rate(benchEvents, enqueueAll(b, client, q, tasks, 1))
	deleteQueue(b, addr, q)
	q = testenv.Name("oa-bench-raw10")
	raw10 := rate(benchEvents, enqueueAll(b, client, q, tasks, relay.DefaultConcurrency))
	deleteQueue(b, addr, q)

	noop := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })
	for _, v := range []struct {
		name    string
		noop    bool // publish nothing: the relay's own limit
		analyze bool // fresh planner statistics before the drain
		relays  int
		opts    []relay.Option
	}{
		{name: "relay=default", relays: 1},
		{name: "relay=noop-publisher", noop: true, relays: 1},
		{name: "relay=analyzed", analyze: true, relays: 1},
		{name: "relay=analyzed-batch500", analyze: true, relays: 1, opts: []relay.Option{relay.WithBatchSize(500)}},
		{name: "relays=4", relays: 4},
	} {
		b.Run(v.name, func(b *testing.B) {
			var took time.Duration
			for range b.N {
				b.StopTimer()
				db, _ := setupDB(b, testenv.Open(b, testenv.Postgres))
				emitN(b, db, benchEvents, benchEvent)
				if v.analyze {
					must(b, db.Exec("ANALYZE outbox_events").Error)
				}
				q := testenv.Name("oa-bench-relay")
				var pub relay.Publisher = outboxasynq.NewPublisher(client, outboxasynq.WithQueue(func(*outbox.Envelope) string { return q }))
				if v.noop {
					pub = noop
				}
				b.StartTimer()
				took += relayAll(b, db, pub, v.relays, v.opts...)
				b.StopTimer()
				deleteQueue(b, addr, q)
			}
			rel := rate(b.N*benchEvents, took)
			b.ReportMetric(rel, "relay-events/s")
			b.ReportMetric(raw, "raw-events/s")
			b.ReportMetric(raw10, "raw10-events/s")
			b.ReportMetric(rel/raw, "relay/raw")
			b.ReportMetric(rel/raw10, "relay/raw10")
		})
	}
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// rawTasks builds, from the stored events, the tasks a Publisher enqueues.
func rawTasks(b *testing.B, db *gorm.DB) []*asynq.Task {
	var rows []outbox.OutboxEvent
	must(b, db.Order("id").Find(&rows).Error)
	tasks := make([]*asynq.Task, len(rows))
	for i, r := range rows {
		e := &outbox.Envelope{ID: r.EventID, Type: r.Type, Version: r.Version, Attempt: 1, Payload: r.Payload,
			Source: outbox.DefaultSource, CreatedAt: r.CreatedAt}
		p, err := json.Marshal(e)
		must(b, err)
		tasks[i] = asynq.NewTaskWithHeaders(r.Type, p, nil, asynq.TaskID(r.EventID))
	}
	return tasks
}

// enqueueAll enqueues tasks into q from workers goroutines, with the
// Publisher's default options, and returns how long it took.
func enqueueAll(b *testing.B, client *asynq.Client, q string, tasks []*asynq.Task, workers int) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tasks) {
					return
				}
				if _, err := client.EnqueueContext(context.Background(), tasks[i],
					asynq.Queue(q), asynq.Retention(outboxasynq.DefaultRetention)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// relayAll runs n relays until every event is published and returns how
// long it took.
func relayAll(b *testing.B, db *gorm.DB, pub relay.Publisher, n int, opts ...relay.Option) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	start := time.Now()
	for i := range n {
		r, err := relay.New(db, pub, append([]relay.Option{relay.WithLogger(testLogger(b)), relay.WithWorkerID(fmt.Sprint("bench-", i))}, opts...)...)
		must(b, err)
		go func() { done <- r.Start(ctx) }()
	}
	for countStatus(b, db, outbox.StatusPublished) < benchEvents {
		time.Sleep(5 * time.Millisecond)
	}
	d := time.Since(start)
	cancel()
	for range n {
		must(b, <-done)
	}
	return d
}
