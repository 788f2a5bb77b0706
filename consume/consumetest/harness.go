package consumetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testdb"
	"github.com/gormoutbox/outbox/relay"
)

// Harness is what a broker adapter gives Exercise: how to publish to its
// broker and consume from it, for fresh destinations that the tests do
// not share.
type Harness struct {
	// NewPublisher returns a relay publisher to the broker. The suite's
	// events carry Topic set to a destination NewDest made, and the
	// publisher must deliver them there.
	NewPublisher func(t testing.TB) relay.Publisher
	// NewDest returns a fresh destination (a stream, queue, subject or
	// topic name, or whatever the adapter routes Topic to), ready to
	// receive, and removes it when t ends.
	NewDest func(t testing.TB) string
	// NewConsumer returns a consumer of dest named name, with opts.
	// Consumers of one dest share its messages (one consumer group,
	// durable or queue), each message going to one of them.
	NewConsumer func(t testing.TB, dest, name string, h consume.Handler, opts ...consume.Option) *consume.Consumer
	// DeadLetters returns the event ids in dest's dead letter (its
	// dead-letter stream, queue, subject or topic), in any order.
	DeadLetters func(t testing.TB, dest string) []string
	// Outage, when not nil, makes the broker unreachable for every
	// publisher and consumer the harness made and will make (a proxy cut),
	// until restore is called. Nil skips the outage test.
	Outage func(t testing.TB) (restore func())
	// KeyOrderAcrossConsumers says that the consumers of one dest handle
	// a partition key's events one at a time, in commit order, whichever
	// consumer takes them (Redis Streams with WithKeyChain and
	// WithKeyOrder, Kafka by partition). Without it, key order is checked
	// within one consumer only (WithConcurrency).
	KeyOrderAcrossConsumers bool
	// BrokerDedupes says that the broker drops a second publish of an
	// event id (NATS's Nats-Msg-Id, asynq's TaskID): a relay killed mid-
	// batch then leaves no duplicate for the consumers to skip.
	BrokerDedupes bool
	// Skip names cases that cannot run against this harness, with the
	// reason (such as a broker in the test's memory, which the relay-kill
	// case's child process cannot reach). Real brokers skip nothing.
	Skip map[string]string
	// Options are added first to every consumer the suite makes (short
	// broker timeouts, so that the tests run quickly).
	Options []consume.Option
}

// Exercise runs the conformance suite against the broker of h: every
// adapter's consumer and publisher pass it against a real server. Run it
// from a test of its own (the relay-kill case runs the test binary again
// with that test's name):
//
//	func TestConformance(t *testing.T) { consumetest.Exercise(t, harness(t)) }
func Exercise(t *testing.T, h Harness) {
	if h.NewPublisher == nil || h.NewDest == nil || h.NewConsumer == nil || h.DeadLetters == nil {
		t.Fatal("consumetest: Harness needs NewPublisher, NewDest, NewConsumer and DeadLetters")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if child := os.Getenv(childEnv); child != "" && child != t.Name() {
				t.Skip("another case runs in this child process")
			}
			if why, ok := h.Skip[c.name]; ok {
				t.Skip(why)
			}
			c.run(t, &h)
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, h *Harness)
}{
	{"EffectsOnce", effectsOnce},
	{"DuplicatesAtOnce", duplicatesAtOnce},
	{"RelayKilledMidBatch", relayKilledMidBatch},
	{"BrokerOutage", brokerOutage},
	{"DependencyDown", dependencyDown},
	{"KeyOrder", keyOrder},
	{"PoisonDeadLettered", poisonDeadLettered},
	{"MaxDeliveries", maxDeliveries},
	{"TypedAndRegistry", typedAndRegistry},
	{"GracefulStop", gracefulStop},
}

// env is one case's database, relay and consumers.
type env struct {
	t     *testing.T
	h     *Harness
	dsn   string
	db    *gorm.DB
	store *idempotency.Store
	dest  string
}

// newEnv makes a fresh SQLite database (migrated, with the effects table)
// and destination for a case.
func newEnv(t *testing.T, h *Harness) *env {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		dsn = testdb.Create(t, testdb.SQLite, "", "consumetest_")
	}
	e := &env{t: t, h: h, dsn: dsn, db: openDB(t, dsn)}
	store, err := idempotency.NewStore(e.db)
	if err != nil {
		t.Fatal(err)
	}
	e.store = store
	if d := os.Getenv(destEnv); d != "" {
		e.dest = d
	} else {
		e.dest = h.NewDest(t)
	}
	return e
}

// openDB opens dsn with the outbox plugin, migrated, and the effects table.
func openDB(t testing.TB, dsn string) *gorm.DB {
	db := testdb.Open(t, testdb.SQLite, dsn, &gorm.Config{Logger: logger.Discard})
	if err := db.Use(&outbox.Plugin{}); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Migrate(db); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&effect{}); err != nil {
		t.Fatal(err)
	}
	return db
}

// effect is one row a handler writes per event it handles: exactly once
// per event id when the handler is idempotent.
type effect struct {
	ID      uint `gorm:"primaryKey"`
	EventID string
	Key     string
	Seq     int
}

func (effect) TableName() string { return "consumetest_effects" }

// quiet is a logger for the relays and consumers: warnings and worse, to
// the test's log.
func quiet(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// payload is what the suite's events carry.
type payload struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// emit commits n events of each key (keys "" for none), in order, one
// transaction per event, and returns their ids in commit order.
func (e *env) emit(keys []string, n int, typ string) []string {
	var ids []string
	for i := range n {
		for _, k := range keys {
			ev := outbox.Event{Type: typ, AggregateType: "consumetest", AggregateID: fmt.Sprint(k, i),
				PartitionKey: k, Topic: e.dest, Payload: payload{Key: k, Seq: i}}
			var id string
			err := e.db.Transaction(func(tx *gorm.DB) error {
				ev.ID = fmt.Sprintf("ct-%s-%s-%d", testdb.RandomHex(4), k, i)
				id = ev.ID
				return outbox.Emit(tx, ev)
			})
			if err != nil {
				e.t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// startRelay runs a relay to the harness's publisher until the case ends.
func (e *env) startRelay(opts ...relay.Option) {
	e.startRelayWith(e.h.NewPublisher(e.t), opts...)
}

func (e *env) startRelayWith(pub relay.Publisher, opts ...relay.Option) {
	r, err := relay.New(e.db, pub, append([]relay.Option{relay.WithPollInterval(20 * time.Millisecond),
		relay.WithLogger(quiet(e.t)), relay.WithListen(false)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.run(r.Start)
}

// run runs fn until the case ends, and waits for it to return.
func (e *env) run(fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("after the case: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Error("did not return 30s after the case ended")
		}
	})
}

// consumer makes a consumer of the case's destination and runs it until
// the case ends (or until stop is called, when it returns stop).
func (e *env) consumer(name string, h consume.Handler, opts ...consume.Option) (stop func()) {
	c := e.h.NewConsumer(e.t, e.dest, name, h, append(append([]consume.Option{consume.WithLogger(quiet(e.t)),
		consume.WithRetryDelay(20 * time.Millisecond), consume.WithMaxRetryDelay(200 * time.Millisecond)},
		e.h.Options...), opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("consumer %s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			e.t.Errorf("consumer %s did not stop within 30s", name)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// effects returns the effects written, by event id.
func (e *env) effects() map[string]int {
	var rows []effect
	if err := e.db.Find(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range rows {
		out[r.EventID]++
	}
	return out
}

// idempotentEffect is an idempotent handler that writes one effect per
// event, in the transaction of its idempotency record, after probe.
func (e *env) idempotentEffect(name string, probe func(ctx context.Context, ev *outbox.Envelope) error) consume.Handler {
	return consume.IdempotentTx(e.store, name, func(ctx context.Context, tx *gorm.DB, ev *outbox.Envelope) error {
		if probe != nil {
			if err := probe(ctx, ev); err != nil {
				return err
			}
		}
		var p payload
		if err := ev.Unmarshal(&p); err != nil {
			return outbox.Permanent(err)
		}
		return tx.Create(&effect{EventID: ev.ID, Key: p.Key, Seq: p.Seq}).Error
	})
}

// waitFor polls cond every 20ms until it holds, or fails the case after
// limit with what describe says.
func (e *env) waitFor(limit time.Duration, what string, cond func() bool, describe func() string) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("after %v, still waiting for %s: %s", limit, what, describe())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitEffects waits until every id has its effect.
func (e *env) waitEffects(ids []string, limit time.Duration) map[string]int {
	e.t.Helper()
	var got map[string]int
	e.waitFor(limit, fmt.Sprintf("the effects of %d events", len(ids)), func() bool {
		got = e.effects()
		for _, id := range ids {
			if got[id] == 0 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%d of %d events have an effect", countIn(got, ids), len(ids)) })
	return got
}

// requireOnce checks that every id has exactly one effect, and that no
// other event has any.
func (e *env) requireOnce(ids []string, got map[string]int) {
	e.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		if got[id] != 1 {
			e.t.Errorf("event %s: %d effects, want 1", id, got[id])
		}
	}
	for id, n := range got {
		if !want[id] {
			e.t.Errorf("effect of an unknown event %s (%d)", id, n)
		}
	}
}

func countIn(got map[string]int, ids []string) int {
	n := 0
	for _, id := range ids {
		if got[id] > 0 {
			n++
		}
	}
	return n
}
