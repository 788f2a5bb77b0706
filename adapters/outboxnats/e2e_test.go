package outboxnats_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	mysqldriver "gorm.io/driver/mysql"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const (
	e2eEvents    = 2000
	e2eHangAfter = 700 // the first relay hangs in the batch that crosses this count
	e2eBatch     = 100
	helperEnv    = "OUTBOX_NATS_HELPER"
)

// effect is the row a handler writes once per event. event_id is not
// unique on purpose: a second effect would be a second row.
type effect struct {
	ID      uint
	EventID string `gorm:"index"`
}

func indexOf(id string) int {
	i, err := strconv.Atoi(id[len("ev-"):])
	if err != nil {
		panic(id)
	}
	return i
}

// failsFirst events fail their first handler run after writing the effect
// (which the failure rolls back).
func failsFirst(id string) bool { return indexOf(id)%50 == 0 }

// openDSN opens a database of the dialect (testenv's names) at dsn.
func openDSN(dialect, dsn string) (*gorm.DB, error) {
	var d gorm.Dialector
	switch dialect {
	case testenv.SQLite:
		d = sqlite.Open(dsn)
	case testenv.Postgres:
		d = pgdriver.Open(dsn)
	case testenv.MySQL:
		d = mysqldriver.Open(dsn)
	default:
		return nil, fmt.Errorf("unknown dialect %q", dialect)
	}
	return gorm.Open(d, testenv.Config())
}

// hangingPublisher publishes whole batches until a batch would take it
// past after events; of that batch it publishes the first half, prints
// HUNG and hangs, so that the relay is caught mid-batch with some of its
// events in the stream and none of them recorded as published.
type hangingPublisher struct {
	next  *outboxnats.Publisher
	after int64
	n     atomic.Int64
	once  sync.Once
}

func (p *hangingPublisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	return p.PublishBatch(ctx, []*outbox.Envelope{e})[0]
}

func (p *hangingPublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	if p.n.Add(int64(len(es))) > p.after {
		for _, err := range p.next.PublishBatch(ctx, es[:len(es)/2]) {
			if err != nil {
				fmt.Fprintln(os.Stderr, "half batch:", err)
			}
		}
		p.once.Do(func() { fmt.Println("HUNG") })
		select {}
	}
	return p.next.PublishBatch(ctx, es)
}

// TestHelperProcess is the relay that TestEndToEnd kills: it runs only as
// its subprocess.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	db, err := openDSN(os.Getenv("OUTBOX_NATS_DIALECT"), os.Getenv("OUTBOX_NATS_DSN"))
	must(t, err)
	must(t, db.Use(&outbox.Plugin{}))
	js, err := jetstream.New(connect(t, natsURL(t)))
	must(t, err)
	p, err := outboxnats.NewPublisher(js, outboxnats.WithSubjectPrefix(os.Getenv("OUTBOX_NATS_STREAM")+"."))
	must(t, err)
	r, err := relay.New(db, &hangingPublisher{next: p, after: e2eHangAfter},
		relay.WithLease(time.Second), relay.WithBatchSize(e2eBatch), relay.WithWorkerID("doomed-relay"), relay.WithLogger(testLogger(t)))
	must(t, err)
	_ = r.Start(context.Background()) // until SIGKILL
}

// TestEndToEnd relays 2,000 events from each database to JetStream and
// consumes them with a durable consumer whose handler writes its effect
// with IdempotentTx, through a relay killed with SIGKILL mid-batch and
// restarted, and handlers that fail after their effect: every effect
// happens exactly once, and the events the dead relay had published
// without recording them are published again and dropped by the stream's
// duplicate window.
func TestEndToEnd(t *testing.T) {
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) { endToEnd(t, dialect) })
	}
}

func endToEnd(t *testing.T, dialect string) {
	dsn := testenv.DSN(t, dialect)
	db, err := openDSN(dialect, dsn)
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	_, store := setupDB(t, db)
	must(t, db.AutoMigrate(&effect{}))
	var dups, acks atomic.Int64
	js := newJS(t, jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, _ *nats.Msg, ack *jetstream.PubAck) {
		if acks.Add(1); ack.Duplicate {
			dups.Add(1)
		}
	}))
	stream := newStream(t, js)
	start := time.Now()
	testenv.Emit(t, db, e2eEvents, func(i int) outbox.Event {
		return outbox.Event{ID: eventID(i), Type: "e2e.event", Topic: "e2e", Payload: map[string]int{"i": i}}
	})

	// The consumer: deliveries counts messages, runs counts handler runs.
	var deliveries, runs counters
	errInjected := errors.New("injected failure after the effect")
	h := outboxnats.IdempotentTx(store, "consumer", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		if err := tx.Create(&effect{EventID: e.ID}).Error; err != nil {
			return err
		}
		if runs.inc(e.ID) == 1 && failsFirst(e.ID) {
			return errInjected
		}
		return nil
	})
	c, err := outboxnats.NewConsumer(js, stream, "e2e", outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		deliveries.inc(e.ID)
		return h.Handle(ctx, e)
	}), consumerOpts(t, outboxnats.WithBatch(100))...)
	must(t, err)
	stopConsumer := run(t, c)

	// 1. A relay in another process, killed with SIGKILL mid-batch.
	killRelayMidBatch(t, dialect, dsn, stream)
	recorded := countStatus(t, db, outbox.StatusPublished)
	stranded := countStatus(t, db, outbox.StatusPublishing)
	inStream := streamMsgs(t, js, stream)
	strandedInStream := int64(inStream) - recorded
	t.Logf("killed after %v: %d events recorded as published, %d stranded, %d of them already in the stream",
		time.Since(start), recorded, stranded, strandedInStream)
	if strandedInStream <= 0 || strandedInStream >= stranded {
		t.Fatalf("the relay was not killed mid-batch: %d stranded events, %d of them in the stream", stranded, strandedInStream)
	}

	// 2. A new relay rescues the stranded events (once the dead relay's
	// lease has expired) and delivers the rest.
	r, err := relay.New(db, newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+".")),
		relay.WithWorkerID("relay-2"), relay.WithLease(2*time.Second), relay.WithBatchSize(e2eBatch), relay.WithLogger(testLogger(t)))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	waitFor(t, 120*time.Second, "every event to be published", func() bool {
		return countStatus(t, db, outbox.StatusPublished) == e2eEvents
	})
	cancel()
	must(t, <-stopped)
	waitFor(t, 120*time.Second, "every effect", func() bool {
		var n int64
		must(t, db.Model(&effect{}).Count(&n).Error)
		return n >= e2eEvents
	})
	waitFor(t, 60*time.Second, "the consumer to settle", settled(t, js, stream, "e2e"))
	stopConsumer()
	t.Logf("all %d events handled %v after the start", e2eEvents, time.Since(start))

	// 3. The duplicate window dropped the redelivered publishes.
	if n := streamMsgs(t, js, stream); n != e2eEvents {
		t.Errorf("the stream holds %d messages, want %d: a redelivered publish was stored twice", n, e2eEvents)
	}
	if dups.Load() != strandedInStream {
		t.Errorf("JetStream reported %d duplicates to the second relay, want %d (the stranded events already in the stream)", dups.Load(), strandedInStream)
	}

	// 4. Exactly once.
	checkExactlyOnce(t, db, store, e2eEvents)
	var bad int
	for i := range e2eEvents {
		id := eventID(i)
		want := int32(1)
		if failsFirst(id) {
			want = 2
		}
		if d, r := deliveries.get(id), runs.get(id); d != want || r != want {
			if bad++; bad <= 10 {
				t.Errorf("%s: delivered %d times, handler ran %d times; want %d of each", id, d, r, want)
			}
		}
	}
	t.Logf("%d redelivered publishes dropped by the duplicate window; %d handlers failed after their effect and ran again",
		dups.Load(), e2eEvents/50)
}

// checkExactlyOnce checks that every event has one effect row and one
// succeeded idempotency record, and that none is left unpublished.
func checkExactlyOnce(t *testing.T, db *gorm.DB, store *idempotency.Store, n int64) {
	t.Helper()
	var rows, distinct, records int64
	must(t, db.Model(&effect{}).Count(&rows).Error)
	must(t, db.Model(&effect{}).Distinct("event_id").Count(&distinct).Error)
	if rows != n || distinct != n {
		t.Errorf("%d effect rows for %d distinct events, want %d of each", rows, distinct, n)
	}
	must(t, db.Table(store.Table()).Where("idempotency_key LIKE ? AND status = ?", "%:consumer", "succeeded").Count(&records).Error)
	if records != n {
		t.Errorf("%d succeeded consumer records, want %d", records, n)
	}
	for _, s := range []outbox.Status{outbox.StatusFailed, outbox.StatusDead, outbox.StatusPending, outbox.StatusPublishing} {
		if c := countStatus(t, db, s); c != 0 {
			t.Errorf("%d events %s", c, s)
		}
	}
}

// killRelayMidBatch runs a relay in a subprocess, waits until it hangs in
// the middle of a batch and kills it with SIGKILL.
func killRelayMidBatch(t *testing.T, dialect, dsn, stream string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "OUTBOX_NATS_DIALECT="+dialect, "OUTBOX_NATS_DSN="+dsn, "OUTBOX_NATS_STREAM="+stream)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if s := stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") || strings.Contains(s, "half batch:") {
			t.Errorf("the relay subprocess reported:\n%s", s)
		}
	})
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	hung := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "HUNG" {
				close(hung)
				break
			}
		}
		for sc.Scan() { // keep the pipe drained
		}
	}()
	select {
	case <-hung:
	case <-time.After(120 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the relay subprocess did not reach its hang point:\n%s", stderr.String())
	}
	must(t, cmd.Process.Kill()) // SIGKILL: no deferred function, no drain
	_ = cmd.Wait()
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
