package outboxasynq_test

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

	"github.com/hibiken/asynq"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const (
	e2eEvents    = 10000
	e2eHangAfter = 3050 // the first relay hangs after this many enqueues, mid-batch
	helperEnv    = "OUTBOX_ASYNQ_HELPER"
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

// failsFirst events fail their first handler run after writing the effect.
func failsFirst(id string) bool { return indexOf(id)%50 == 0 }

// The doomed relay enqueues even events without retention, so that
// redelivering one whose task already completed makes a second task (for
// the idempotency middleware to skip), and odd events with the default
// retention, so that redelivering one is refused by its TaskID.
func noRetention(id string) bool { return indexOf(id)%2 == 0 }

func doomedPublisher(client *asynq.Client) *outboxasynq.Publisher {
	return outboxasynq.NewPublisher(client, outboxasynq.WithTaskOptions(func(e *outbox.Envelope) []asynq.Option {
		if noRetention(e.ID) {
			return []asynq.Option{asynq.Retention(0)}
		}
		return nil
	}))
}

// hangingPublisher delivers until it has delivered after events, then
// hangs every delivery, so that the relay is caught mid-batch.
type hangingPublisher struct {
	next  relay.Publisher
	after int64
	n     atomic.Int64
	once  sync.Once
}

func (p *hangingPublisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	if p.n.Load() >= p.after {
		select {}
	}
	err := p.next.Publish(ctx, e)
	if err == nil && p.n.Add(1) >= p.after {
		p.once.Do(func() { fmt.Println("HUNG") })
		select {}
	}
	return err
}

// TestHelperProcess is the relay that TestEndToEnd kills: it runs only as
// its subprocess.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	after, _ := strconv.ParseInt(os.Getenv("OUTBOX_ASYNQ_HANG_AFTER"), 10, 64)
	db, err := gorm.Open(pgdriver.Open(os.Getenv("OUTBOX_ASYNQ_DSN")), testenv.Config())
	must(t, err)
	must(t, db.Use(&outbox.Plugin{}))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: os.Getenv(testenv.RedisEnv)})
	pub := &hangingPublisher{next: doomedPublisher(client), after: after}
	r, err := relay.New(db, pub, relay.WithLease(time.Second), relay.WithWorkerID("doomed-relay"), relay.WithLogger(testLogger(t)))
	must(t, err)
	_ = r.Start(context.Background()) // until SIGKILL
}

// TestEndToEnd relays 10,000 events from PostgreSQL to asynq and consumes
// them with an asynq server, through a relay killed with SIGKILL mid-batch
// and restarted, and handlers that fail after their effect: every
// handler's effect happens exactly once.
func TestEndToEnd(t *testing.T) {
	addr := testenv.RedisAddr(t)
	dsn := testenv.DSN(t, testenv.Postgres)
	db, err := gorm.Open(pgdriver.Open(dsn), testenv.Config())
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	_, store := setupDB(t, db)
	must(t, db.AutoMigrate(&effect{}))
	q := newQueue(t, addr)
	ins := newInspector(t, addr)
	start := time.Now()
	emitN(t, db, e2eEvents, func(i int) outbox.Event {
		return outbox.Event{ID: eventID(i), Type: "e2e.event", Topic: q, Payload: map[string]int{"i": i}}
	})
	t.Logf("emitted %d events in %v", e2eEvents, time.Since(start))

	// The consumer: Idempotent around a handler whose effect is a row
	// written with DoTx. outer counts deliveries, body handler runs.
	outer, body := &counters{}, &counters{}
	errInjected := errors.New("injected failure after the effect")
	mux := asynq.NewServeMux()
	mux.Use(func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			if e, err := outboxasynq.Decode(t); err == nil {
				outer.inc(e.ID)
			}
			return next.ProcessTask(ctx, t)
		})
	}, outboxasynq.Idempotent(store, "consumer"))
	mux.Handle("e2e.event", outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
		n := body.inc(e.ID)
		err := store.DoTx(ctx, e.ID+":effect", func(tx *gorm.DB) error {
			return tx.Create(&effect{EventID: e.ID}).Error
		})
		if err != nil {
			return err
		}
		if n == 1 && failsFirst(e.ID) {
			return errInjected
		}
		return nil
	}))
	startServer(t, addr, q, 8, mux)

	// 1. A relay in another process, killed with SIGKILL mid-batch.
	killed := killRelayMidBatch(t, dsn, q)
	drained := func() bool {
		qi, err := ins.GetQueueInfo(q)
		return err == nil && qi.Pending+qi.Active+qi.Retry+qi.Scheduled == 0
	}
	waitFor(t, 60*time.Second, "the consumer to drain the dead relay's tasks", drained)
	time.Sleep(time.Until(killed.Add(1200 * time.Millisecond))) // its 1s lease has expired
	// Read what the dead relay left only now: a completion it sent just
	// before SIGKILL still commits on the server after the kill, and the
	// events it records are not stranded.
	var stranded []string // claimed by the dead relay, never completed
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", outbox.StatusPublishing).Pluck("event_id", &stranded).Error)
	if len(stranded) == 0 {
		t.Fatal("the relay was not killed mid-batch: no event is left publishing")
	}
	var enqueuedEven, enqueuedOdd []string // stranded, yet already in asynq
	for _, id := range stranded {
		if outer.get(id) > 0 {
			if noRetention(id) {
				enqueuedEven = append(enqueuedEven, id)
			} else {
				enqueuedOdd = append(enqueuedOdd, id)
			}
		}
	}
	t.Logf("killed after %v: %d events stranded, %d of them already enqueued (%d without retention)",
		killed.Sub(start), len(stranded), len(enqueuedEven)+len(enqueuedOdd), len(enqueuedEven))
	if len(enqueuedEven) == 0 || len(enqueuedOdd) == 0 {
		t.Fatalf("the dead relay left no enqueued-but-unrecorded event of each kind (%d even, %d odd)", len(enqueuedEven), len(enqueuedOdd))
	}

	// 2. A new relay rescues the stranded events and delivers the rest.
	r, err := relay.New(db, outboxasynq.NewPublisher(newClient(t, addr)),
		relay.WithWorkerID("relay-2"), relay.WithLease(2*time.Second), relay.WithLogger(testLogger(t)))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	waitFor(t, 60*time.Second, "every event to be published", func() bool {
		return countStatus(t, db, outbox.StatusPublished) == e2eEvents
	})
	cancel()
	must(t, <-stopped)
	t.Logf("all published %v after the start", time.Since(start))
	waitFor(t, 60*time.Second, "every task to be handled", func() bool {
		var n int64
		must(t, db.Model(&effect{}).Count(&n).Error)
		if n >= e2eEvents && drained() {
			return true
		}
		if qi, err := ins.GetQueueInfo(q); err == nil && time.Now().Second()%5 == 0 {
			t.Logf("effects %d; queue %+v", n, *qi)
		}
		return false
	})
	t.Logf("all %d events handled %v after the start", e2eEvents, time.Since(start))

	// 3. Exactly once.
	var rows, distinct int64
	must(t, db.Model(&effect{}).Count(&rows).Error)
	must(t, db.Model(&effect{}).Distinct("event_id").Count(&distinct).Error)
	if rows != e2eEvents || distinct != e2eEvents {
		t.Errorf("%d effect rows for %d distinct events, want %d of each", rows, distinct, e2eEvents)
	}
	var records int64
	must(t, db.Table("outbox_idempotency").Where("idempotency_key LIKE ? AND status = ?", "%:consumer", "succeeded").Count(&records).Error)
	if records != e2eEvents {
		t.Errorf("%d succeeded consumer records, want %d", records, e2eEvents)
	}
	for _, s := range []outbox.Status{outbox.StatusFailed, outbox.StatusDead, outbox.StatusPending} {
		if n := countStatus(t, db, s); n != 0 {
			t.Errorf("%d events %s", n, s)
		}
	}
	duplicates := map[string]bool{}
	for _, id := range enqueuedEven {
		duplicates[id] = true
	}
	var bad, retried, skipped int
	for i := range e2eEvents {
		id := eventID(i)
		wantBody := int32(1)
		if failsFirst(id) {
			wantBody, retried = 2, retried+1
		}
		wantOuter := wantBody
		if duplicates[id] {
			wantOuter, skipped = wantOuter+1, skipped+1
		}
		if b, o := body.get(id), outer.get(id); b != wantBody || o != wantOuter {
			if bad++; bad <= 10 {
				t.Errorf("%s: handler ran %d times over %d deliveries, want %d over %d", id, b, o, wantBody, wantOuter)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d events handled the wrong number of times", bad)
	}
	t.Logf("%d handlers failed after their effect and were retried; %d duplicate tasks skipped by Idempotent; %d redeliveries refused by TaskID",
		retried, skipped, len(enqueuedOdd))
}

// killRelayMidBatch runs a relay in a subprocess, waits until it hangs in
// the middle of a batch and kills it with SIGKILL; it returns when.
func killRelayMidBatch(t *testing.T, dsn, q string) time.Time {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "OUTBOX_ASYNQ_DSN="+dsn, "OUTBOX_ASYNQ_QUEUE="+q,
		"OUTBOX_ASYNQ_HANG_AFTER="+strconv.Itoa(e2eHangAfter))
	var stderr syncBuffer
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if strings.Contains(stderr.String(), "DATA RACE") || strings.Contains(stderr.String(), "panic:") {
			t.Errorf("the relay subprocess reported:\n%s", stderr.String())
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
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the relay subprocess did not reach its hang point")
	}
	must(t, cmd.Process.Kill()) // SIGKILL: no deferred function, no drain
	at := time.Now()
	_ = cmd.Wait()
	return at
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
