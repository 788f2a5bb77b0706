package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// BenchmarkThroughput drains a backlog of 50,000 pending events to
// published with a no-op publisher, per dialect and number of relays, and
// drains the same backlog with a hand-written minimal claim/mark loop (the
// limit: one statement to claim a batch, one to mark it, nothing else).
// Both run in each iteration, so their ratio compares like with like:
//
//	go test -run '^$' -bench BenchmarkThroughput -benchtime 1x ./relay
func BenchmarkThroughput(b *testing.B) {
	const events, batch = 50000, 100
	for _, d := range testenv.Dialects {
		for _, relays := range []int{1, 4} {
			if d == testenv.SQLite && relays > 1 {
				continue // SQLite runs one writer: one relay
			}
			b.Run(fmt.Sprintf("%s/relays=%d", d, relays), func(b *testing.B) {
				db := testenv.Open(b, d)
				if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
					b.Fatal(err)
				}
				var relayRate, minimalRate float64
				for b.Loop() {
					fill(b, db, events)
					minimalRate += drainMinimal(b, db, relays, batch, events)
					fill(b, db, events)
					relayRate += drainRelay(b, db, relays, batch, events)
				}
				relayRate /= float64(b.N)
				minimalRate /= float64(b.N)
				b.ReportMetric(relayRate, "relay-events/s")
				b.ReportMetric(minimalRate, "minimal-events/s")
				b.ReportMetric(relayRate/minimalRate, "relay/minimal")
			})
		}
	}
}

// fill empties the table and writes n pending events.
func fill(b *testing.B, db *gorm.DB, n int) {
	b.Helper()
	if err := db.Exec("DELETE FROM outbox_events").Error; err != nil {
		b.Fatal(err)
	}
	emitN(b, db, n, func(i int) outbox.Event {
		return outbox.Event{Type: "bench", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i}}
	})
}

func drainRelay(b *testing.B, db *gorm.DB, relays, batch, n int) float64 {
	var done atomic.Int64
	pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { done.Add(1); return nil })
	start := time.Now()
	runRelays(b, db, relays, pub, 10*time.Minute, func() bool { return done.Load() >= int64(n) },
		relay.WithRetention(0)) // the default batch size: it grows while the backlog lasts
	return float64(n) / time.Since(start).Seconds()
}

// drainMinimal is the limit: workers that claim a batch with the simplest
// statement the dialect allows (served by the claim index, which holds the
// events without a key), read what a delivery needs (the columns of an
// outbox.Envelope), and mark the batch published with another.
func drainMinimal(b *testing.B, db *gorm.DB, workers, batch, n int) float64 {
	var (
		done  atomic.Int64
		wg    sync.WaitGroup
		start = time.Now()
	)
	for w := range workers {
		wg.Go(func() {
			worker := fmt.Sprint("minimal-", w)
			for done.Load() < int64(n) {
				ids := claimMinimal(b, db, worker, batch)
				if len(ids) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				if err := db.Exec("UPDATE outbox_events SET status = 'published', locked_by = NULL WHERE id IN ?", ids).Error; err != nil {
					b.Error(err)
					return
				}
				done.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// minimalRow is what a delivery needs at the least: an Envelope's fields.
type minimalRow struct {
	ID            int64
	EventID       string
	Type          string
	Version       int
	TenantID      string
	AggregateType string
	AggregateID   string
	PartitionKey  string
	Topic         string
	Payload       []byte
	Headers       []byte
	Attempts      int
	CreatedAt     time.Time
}

const minimalColumns = "id, event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, attempts, created_at"

func claimMinimal(b *testing.B, db *gorm.DB, worker string, batch int) []int64 {
	var rows []minimalRow
	var err error
	switch db.Dialector.Name() {
	case "postgres":
		err = db.Raw(`UPDATE outbox_events SET status = 'publishing', locked_by = ? WHERE id IN (
			SELECT id FROM outbox_events WHERE status IN ('pending', 'failed') AND partition_key = '' AND available_at <= now()
			ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED) RETURNING `+minimalColumns, worker, batch).Scan(&rows).Error
	case "mysql":
		err = db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Raw(`SELECT `+minimalColumns+` FROM outbox_events WHERE status = 'pending' AND partition_key = '' AND available_at <= UTC_TIMESTAMP(6)
				ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED`, batch).Scan(&rows).Error; err != nil || len(rows) == 0 {
				return err
			}
			return tx.Exec("UPDATE outbox_events SET status = 'publishing', locked_by = ? WHERE id IN ?", worker, ids(rows)).Error
		}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	default:
		err = db.Raw(`UPDATE outbox_events SET status = 'publishing', locked_by = ? WHERE id IN (
			SELECT id FROM outbox_events WHERE status IN ('pending', 'failed') AND partition_key = '' AND available_at <= ?
			ORDER BY available_at, id LIMIT ?) RETURNING `+minimalColumns, worker, time.Now().UTC().Format("2006-01-02 15:04:05.000000000+00:00"), batch).Scan(&rows).Error
	}
	if err != nil {
		b.Error(err)
	}
	return ids(rows)
}

func ids(rows []minimalRow) []int64 {
	out := make([]int64, len(rows))
	for i := range rows {
		out[i] = rows[i].ID
	}
	return out
}

// BenchmarkLatency measures commit-to-handler latency on PostgreSQL: an
// idle relay (polling every 5s) woken by LISTEN/NOTIFY, events committed
// one per transaction every 5ms. It reports the median and 99th percentile.
//
//	go test -run '^$' -bench BenchmarkLatency -benchtime 1x ./relay
func BenchmarkLatency(b *testing.B) {
	for _, d := range testenv.Dialects {
		b.Run(d, func(b *testing.B) {
			db := testenv.Open(b, d)
			if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
				b.Fatal(err)
			}
			const n = 1000
			var (
				mu        sync.Mutex
				committed = make(map[string]time.Time, n)
				lat       []time.Duration
			)
			pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
				now := time.Now()
				mu.Lock()
				lat = append(lat, now.Sub(committed[e.ID]))
				mu.Unlock()
				return nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			r := newRelay(b, db, pub)
			done := make(chan error, 1)
			go func() { done <- r.Start(ctx) }()
			time.Sleep(200 * time.Millisecond)
			for b.Loop() {
				for i := range n {
					id := fmt.Sprintf("lat-%d-%d", b.N, i)
					mu.Lock() // the handler may run before Transaction returns
					err := db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{ID: id, Type: "lat"}) })
					committed[id] = time.Now()
					mu.Unlock()
					if err != nil {
						b.Fatal(err)
					}
					time.Sleep(5 * time.Millisecond)
				}
				for {
					mu.Lock()
					got := len(lat)
					mu.Unlock()
					if got >= n {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			cancel()
			<-done
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkKeyedBacklog drains a backlog of 8,000 pending events with one
// relay at its defaults, per dialect: without partition keys, over 8 keys
// and over 1,000 keys (event i has key i mod keys), each after ANALYZE.
// Each iteration drains all three, so that a ratio compares drains run
// moments apart; it reports the median rates and the median over
// iterations of each keyed/unkeyed ratio (a drain takes a fraction of a
// second, and one stall of a 2-core machine would skew a mean). A drain
// that has not finished after keyedDrainLimit reports the rate it reached.
//
//	go test -run '^$' -bench BenchmarkKeyedBacklog -benchtime 16x ./relay
func BenchmarkKeyedBacklog(b *testing.B) {
	const events = 8000
	for _, d := range testenv.Dialects {
		b.Run(d, func(b *testing.B) {
			db := testenv.Open(b, d)
			if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
				b.Fatal(err)
			}
			drainKeyed(b, db, events/4, 0) // warm up: connections, statement and plan caches
			var unkeyed, keys8, keys1000, ratio8, ratio1000 []float64
			for b.Loop() {
				u := drainKeyed(b, db, events, 0)
				k8 := drainKeyed(b, db, events, 8)
				k1000 := drainKeyed(b, db, events, 1000)
				unkeyed, keys8, keys1000 = append(unkeyed, u), append(keys8, k8), append(keys1000, k1000)
				ratio8, ratio1000 = append(ratio8, k8/u), append(ratio1000, k1000/u)
			}
			b.ReportMetric(testenv.Median(unkeyed), "unkeyed-events/s")
			b.ReportMetric(testenv.Median(keys8), "8keys-events/s")
			b.ReportMetric(testenv.Median(keys1000), "1000keys-events/s")
			b.ReportMetric(testenv.Median(ratio8), "8keys/unkeyed")
			b.ReportMetric(testenv.Median(ratio1000), "1000keys/unkeyed")
		})
	}
}

// keyedDrainLimit bounds one drain of BenchmarkKeyedBacklog.
const keyedDrainLimit = 2 * time.Minute

// drainKeyed fills the table with n pending events over keys partition
// keys (none when keys is 0), refreshes the statistics, and returns the
// rate at which one relay with default options publishes them.
func drainKeyed(b *testing.B, db *gorm.DB, n, keys int) float64 {
	b.Helper()
	testenv.Backlog(b, db, n, keys)
	var done atomic.Int64
	pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { done.Add(1); return nil })
	r, err := relay.New(db, pub, relay.WithLogger(testLogger(b)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- r.Start(ctx) }()
	for done.Load() < int64(n) && time.Since(start) < keyedDrainLimit {
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	got := done.Load()
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	if got < int64(n) {
		b.Logf("%d keys: %d of %d events published in %v", keys, got, n, took.Round(time.Millisecond))
	}
	return float64(got) / took.Seconds()
}
