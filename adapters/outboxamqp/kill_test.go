package outboxamqp_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "gorm.io/driver/mysql"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const (
	helperEnv       = "OUTBOX_AMQP_HELPER"
	killEvents      = 600
	killBatch       = 50
	killHangAtBatch = 4 // the doomed relay hangs in its 4th batch, half of it published
)

// openDSN opens a database of the dialect by its DSN, closed when t ends.
func openDSN(t testing.TB, dialect, dsn string) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	switch dialect {
	case testenv.SQLite:
		d = sqlite.Open(dsn)
	case testenv.Postgres:
		d = pgdriver.Open(dsn)
	case testenv.MySQL:
		d = mysqldriver.Open(dsn)
	}
	db, err := gorm.Open(d, testenv.Config())
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// hangingPublisher publishes batches until its hangAt-th, of which it
// publishes the first half (confirmed by the broker) before it prints
// their ids and hangs: the relay is caught mid-batch, with events in the
// broker that it never recorded as published.
type hangingPublisher struct {
	*outboxamqp.Publisher
	hangAt  int64
	batches atomic.Int64
}

func (p *hangingPublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	if p.batches.Add(1) < p.hangAt {
		return p.Publisher.PublishBatch(ctx, es)
	}
	half := es[:len(es)/2]
	var ids []string
	for i, err := range p.Publisher.PublishBatch(ctx, half) {
		if err == nil {
			ids = append(ids, half[i].ID)
		}
	}
	fmt.Println("HUNG " + strings.Join(ids, ","))
	select {}
}

// TestHelperRelay is the relay that TestRelayKilledMidBatch kills: it runs
// only as its subprocess.
func TestHelperRelay(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	db := openDSN(t, os.Getenv("OUTBOX_AMQP_DIALECT"), os.Getenv("OUTBOX_AMQP_DSN"))
	must(t, db.Use(&outbox.Plugin{}))
	conn := dialURL(t, brokerURL(t))
	pub, err := outboxamqp.NewPublisher(conn)
	must(t, err)
	r, err := relay.New(db, &hangingPublisher{Publisher: pub, hangAt: killHangAtBatch},
		relay.WithLease(time.Second), relay.WithBatchSize(killBatch), relay.WithWorkerID("doomed-relay"), relay.WithLogger(testLogger(t)))
	must(t, err)
	_ = r.Start(context.Background()) // until SIGKILL
}

// TestRelayKilledMidBatch runs a relay in another process that publishes
// half a batch to RabbitMQ and is killed with SIGKILL before it records
// it; a new relay rescues the batch once the lease expired and publishes
// it again, so the broker holds those events twice; the consumer's
// IdempotentTx makes every effect happen exactly once.
func TestRelayKilledMidBatch(t *testing.T) {
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			dsn := testenv.DSN(t, dialect)
			db, store := setupDB(t, openDSN(t, dialect, dsn))
			must(t, db.AutoMigrate(&effect{}))
			q := queue(t, "kill", nil)
			emitN(t, db, killEvents, q)

			inBroker := killRelayMidBatch(t, dialect, dsn)
			var stranded []string // claimed by the dead relay, never completed
			must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", outbox.StatusPublishing).Pluck("event_id", &stranded).Error)
			strandedSet := map[string]bool{}
			for _, id := range stranded {
				strandedSet[id] = true
			}
			if len(inBroker) == 0 {
				t.Fatal("the doomed relay published nothing of its last batch")
			}
			for _, id := range inBroker {
				if !strandedSet[id] {
					t.Fatalf("%s is in the broker but not stranded: the relay was not killed mid-batch (stranded: %v)", id, stranded)
				}
			}
			t.Logf("killed mid-batch: %d events stranded, %d of them already in the broker", len(stranded), len(inBroker))

			var deliveries, runs counter
			stopConsumer := runConsumer(t, effectConsumer(t, dial(t), q, store, &deliveries, &runs))
			stopRelay := startRelay(t, newRelay(t, db, newPublisher(t, dial(t)), relay.WithWorkerID("relay-2"), relay.WithBatchSize(killBatch),
				relay.WithLease(2*time.Second))) // it looks for expired leases every second)
			eventually(t, 60*time.Second, "every event published", func() bool {
				return countStatus(t, db, outbox.StatusPublished) == killEvents
			})
			stopRelay()
			eventually(t, 60*time.Second, "every message handled", func() bool {
				return effects(t, db) >= killEvents && depth(t, q) == 0 && deliveries.count() >= killEvents+len(inBroker)
			})
			stopConsumer()
			checkOnce(t, db, killEvents)
			for _, id := range inBroker {
				if d, r := deliveries.get(id), runs.get(id); d != 2 || r != 1 {
					t.Errorf("%s (published twice): %d deliveries, %d effect runs; want 2 and 1", id, d, r)
				}
			}
			for i := range killEvents {
				if r := runs.get(eventID(i)); r != 1 {
					t.Errorf("%s: effect ran %d times", eventID(i), r)
				}
			}
		})
	}
}

// killRelayMidBatch runs the helper relay, waits until it hangs mid-batch,
// kills it with SIGKILL, and returns the ids it published in that batch.
func killRelayMidBatch(t *testing.T, dialect, dsn string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRelay$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "OUTBOX_AMQP_DIALECT="+dialect, "OUTBOX_AMQP_DSN="+dsn)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if s := stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") {
			t.Errorf("the relay subprocess reported:\n%s", s)
		}
	})
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	hung := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if ids, ok := strings.CutPrefix(sc.Text(), "HUNG"); ok {
				hung <- strings.FieldsFunc(ids, func(r rune) bool { return r == ',' || r == ' ' })
				break
			}
		}
		for sc.Scan() { // keep the pipe drained
		}
	}()
	var ids []string
	select {
	case ids = <-hung:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the relay subprocess did not reach its hang point; stderr:\n%s", stderr.String())
	}
	must(t, cmd.Process.Kill()) // SIGKILL: no deferred function, no drain
	_ = cmd.Wait()
	return ids
}

// syncBuffer is a bytes.Buffer safe for a subprocess's writer and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
