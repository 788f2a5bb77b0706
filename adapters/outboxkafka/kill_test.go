package outboxkafka_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "gorm.io/driver/mysql"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const (
	helperEnv       = "OUTBOX_KAFKA_HELPER"
	killEvents      = 600
	killBatch       = 50
	killHangAtBatch = 4 // the doomed relay hangs in its 4th PublishBatch, half of it produced
)

// openDSN opens a database of the dialect by its DSN, closed when t ends.
func openDSN(t testing.TB, dialect, dsn string) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	switch dialect {
	case testenv.SQLite:
		d = testenv.SQLiteDialector(dsn)
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

// hangingPublisher prints the ids it published in each PublishBatch call
// (a round of a relay batch) until its hangAt-th call, of which it
// publishes the first half (acknowledged by the brokers) before it prints
// their ids and hangs: the relay is caught mid-batch, with events in Kafka
// that it never recorded as published.
type hangingPublisher struct {
	*outboxkafka.Publisher
	hangAt  int64
	batches atomic.Int64
}

func (p *hangingPublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	hang := p.batches.Add(1) >= p.hangAt
	if hang {
		es = es[:len(es)/2]
	}
	errs := p.Publisher.PublishBatch(ctx, es)
	var ids []string
	for i, err := range errs {
		if err == nil {
			ids = append(ids, es[i].ID)
		}
	}
	if !hang {
		fmt.Println("PUB " + strings.Join(ids, ","))
		return errs
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
	db := openDSN(t, os.Getenv("OUTBOX_KAFKA_DIALECT"), os.Getenv("OUTBOX_KAFKA_DSN"))
	must(t, db.Use(&outbox.Plugin{}))
	c := &cluster{brokers: strings.Split(os.Getenv("OUTBOX_KAFKA_SEEDS"), ",")}
	pub := &hangingPublisher{Publisher: newPublisher(t, c.client(t)), hangAt: killHangAtBatch}
	r, err := relay.New(db, pub, relay.WithLease(time.Second), relay.WithBatchSize(killBatch),
		relay.WithWorkerID("doomed-relay"), relay.WithLogger(testLogger(t)))
	must(t, err)
	_ = r.Start(context.Background()) // until SIGKILL
}

// TestRelayKilledMidBatch runs a relay in another process that produces
// half a batch to Kafka and is killed with SIGKILL before it records it;
// a new relay rescues the batch once the lease expired and publishes it
// again, so the topic holds those events twice; a consumer that drops
// duplicates by event id sees each key's events in commit order, and an
// idempotent one gives every event its effect exactly once.
func TestRelayKilledMidBatch(t *testing.T) {
	testenv.LongFault(t)
	onEach(t, func(t *testing.T, c *cluster, dialect string) {
		dsn := testenv.DSN(t, dialect)
		db, store := setupDB(t, openDSN(t, dialect, dsn))
		topic := c.topic(t, 6, nil)
		emitKeyed(t, db, killEvents, topic)

		hung, produced := killRelayMidBatch(t, c, dialect, dsn)
		var stranded []string // claimed by the dead relay, never completed
		must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", outbox.StatusPublishing).Pluck("event_id", &stranded).Error)
		if len(hung) == 0 {
			t.Fatal("the doomed relay produced nothing of its last call")
		}
		inKafka := 0 // stranded events Kafka has already: they come twice
		for _, id := range stranded {
			if produced[id] {
				inKafka++
			}
		}
		for _, id := range hung {
			if !slices.Contains(stranded, id) {
				t.Fatalf("%s is in Kafka but not stranded: the relay was not killed mid-batch (stranded: %v)", id, stranded)
			}
		}
		t.Logf("killed mid-batch: %d events stranded, %d of them already in Kafka", len(stranded), inKafka)

		stop := startRelay(t, newRelay(t, db, newPublisher(t, c.client(t)), relay.WithWorkerID("relay-2"),
			relay.WithBatchSize(killBatch), relay.WithLease(2*time.Second)))
		eventually(t, 60*time.Second, "every event published", func() bool {
			return countStatus(t, db, outbox.StatusPublished) == killEvents
		})
		stop()
		checkPublished(t, db, killEvents)
		ds := decode(t, c.records(t, topic))
		if dups := checkAll(t, ds, killEvents); dups != inKafka {
			t.Errorf("%d records more than events, want %d (those produced before the kill)", dups, inKafka)
		}
		checkFirstOrder(t, ds)
		applyOnce(t, db, store, ds, killEvents)
	})
}

// killRelayMidBatch runs the helper relay, waits until it hangs mid-batch,
// kills it with SIGKILL, and returns the ids it produced in its last call,
// and all those it produced.
func killRelayMidBatch(t *testing.T, c *cluster, dialect, dsn string) (hung []string, produced map[string]bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRelay$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "OUTBOX_KAFKA_DIALECT="+dialect, "OUTBOX_KAFKA_DSN="+dsn,
		"OUTBOX_KAFKA_SEEDS="+strings.Join(c.seeds(), ","))
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
	produced = map[string]bool{}
	hungc := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		split := func(s string) []string {
			return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
		}
		for sc.Scan() {
			if ids, ok := strings.CutPrefix(sc.Text(), "PUB"); ok {
				for _, id := range split(ids) {
					produced[id] = true
				}
			}
			if ids, ok := strings.CutPrefix(sc.Text(), "HUNG"); ok {
				hungc <- split(ids)
				break
			}
		}
		for sc.Scan() { // keep the pipe drained
		}
	}()
	select {
	case hung = <-hungc: // produced is complete: HUNG came after every PUB
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the relay subprocess did not reach its hang point; stderr:\n%s", stderr.String())
	}
	for _, id := range hung {
		produced[id] = true
	}
	must(t, cmd.Process.Kill()) // SIGKILL: no deferred function, no drain
	_ = cmd.Wait()
	return hung, produced
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
