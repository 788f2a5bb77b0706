package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/outboxtest"
	"github.com/gormoutbox/outbox/relay"
)

// featItem is tracked (Track): its writes emit events.
type featItem struct {
	ID   int64
	Name string
}

// featOrder records its events (Recorder).
type featOrder struct {
	ID int64
	outbox.Recorder
}

type typedPayload struct {
	N int `json:"n"`
}

// capture is a publisher that records deliveries and fails the events
// named in fail.
type capture struct {
	mu   sync.Mutex
	got  map[string][]*outbox.Envelope
	at   map[string]time.Time
	fail map[string]bool
	dead []string // WithOnDead's calls
}

func (c *capture) Publish(_ context.Context, e *outbox.Envelope) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[e.ID] = append(c.got[e.ID], e)
	if _, ok := c.at[e.ID]; !ok {
		c.at[e.ID] = time.Now()
	}
	if c.fail[e.ID] {
		return errors.New("refused by the test")
	}
	return nil
}

func (c *capture) deliveries(id string) []*outbox.Envelope {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got[id]
}

// walFeaturesDB starts a server and a relay in WAL mode with a registry
// (feat.typed registered, others lenient), a tracked model, the attempt
// log and WithOnDead, delivering to a capture that fails event "dies".
func walFeaturesDB(t *testing.T) (*gorm.DB, *capture) {
	pg := startPostgresWAL(t)
	db, err := gorm.Open(postgres.Open(pg.DSN()), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	reg := outbox.NewRegistry(outbox.Lenient())
	if err := outbox.Register[typedPayload](reg, "feat.typed", 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Use(&outbox.Plugin{WAL: &outbox.WAL{}, AutoMigrate: true, Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&featItem{}, &featOrder{}); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Track(db, &featItem{}); err != nil {
		t.Fatal(err)
	}
	pub := &capture{got: map[string][]*outbox.Envelope{}, at: map[string]time.Time{}, fail: map[string]bool{"dies": true}}
	r, err := relay.New(db, pub, relay.WithAttemptLog(), relay.WithBackoff(func(int) time.Duration { return 100 * time.Millisecond }),
		relay.WithPollInterval(50*time.Millisecond), relay.WithLogger(testLogger(t)),
		relay.WithOnDead(func(_ context.Context, e *outbox.Envelope, _ error) {
			pub.mu.Lock()
			pub.dead = append(pub.dead, e.ID)
			pub.mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return db, pub

}

// Every write feature in WAL mode: metadata headers, a Recorder, Track,
// the registry's checks at write, an event delayed by AvailableAt (into
// the table, delivered when due), an ID written twice (delivered twice
// under it: consumers dedupe), MaxAttempts carried to the table's retries
// and dead letters (with WithOnDead and the attempt log), retention (the
// table's rows only).
func TestWALFeatures(t *testing.T) {
	t.Parallel()
	db, pub := walFeaturesDB(t)
	emit := func(ctx context.Context, evs ...outbox.Event) error {
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, evs...) })
	}
	mctx := outbox.WithMetadata(context.Background(), outbox.Metadata{Actor: "ada", Tenant: "t1"})
	written := time.Now()
	steps := []error{
		emit(mctx, outbox.Event{ID: "meta", Type: "feat.meta"}),
		db.Create(&featOrder{Recorder: recorded(outbox.Event{ID: "recorded", Type: "feat.recorded"})}).Error,
		db.Create(&featItem{Name: "x"}).Error,
		emit(context.Background(), outbox.Event{ID: "typed", Type: "feat.typed", Payload: typedPayload{N: 1}}),
		emit(context.Background(), outbox.Event{ID: "later", Type: "feat.later", PartitionKey: "kl", AvailableAt: written.Add(2 * time.Second)}),
		emit(context.Background(), outbox.Event{ID: "after-later", Type: "feat.later", PartitionKey: "kl"}),
		emit(context.Background(), outbox.Event{ID: "twice", Type: "feat.twice"}),
		emit(context.Background(), outbox.Event{ID: "twice", Type: "feat.twice"}),
		emit(context.Background(), outbox.Event{ID: "dies", Type: "feat.dies", MaxAttempts: 2}),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	bad := emit(context.Background(), outbox.Event{ID: "bad", Type: "feat.typed", Payload: map[string]string{"n": "not a number"}})
	if !errors.Is(bad, outbox.ErrInvalidEvent) {
		t.Errorf("the registry let an invalid payload through in WAL mode: %v", bad)
	}

	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && (len(pub.deliveries("after-later")) == 0 || len(pub.deliveries("dies")) < 2 || len(pub.deliveries("twice")) < 2) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range []string{"meta", "recorded", "typed", "later", "after-later"} {
		if n := len(pub.deliveries(id)); n != 1 {
			t.Errorf("event %s delivered %d times, want 1", id, n)
		}
	}
	if d := pub.deliveries("meta"); len(d) > 0 && (d[0].Headers[outbox.HeaderActor] != "ada" || d[0].TenantID != "t1") {
		t.Errorf("metadata lost: headers %v, tenant %q", d[0].Headers, d[0].TenantID)
	}
	trackedSeen := false
	for id, d := range pub.got {
		trackedSeen = trackedSeen || (d[0].Type == "feat_item.created" && id != "")
	}
	if !trackedSeen {
		t.Error("Track's event was not delivered")
	}
	if n := len(pub.deliveries("twice")); n != 2 {
		t.Errorf("an ID written twice was delivered %d times, want 2 (no dedupe at write in WAL mode)", n)
	}
	pub.mu.Lock()
	laterAt, afterAt := pub.at["later"], pub.at["after-later"]
	pub.mu.Unlock()
	if laterAt.Before(written.Add(2*time.Second)) || afterAt.Before(laterAt) {
		t.Errorf("delayed event delivered at %v (due %v), the next of its key at %v", laterAt, written.Add(2*time.Second), afterAt)
	}
	checkWALDeadLetter(t, db, pub)
}

// checkWALDeadLetter checks the event that failed every attempt: dead in
// the table after its MaxAttempts (one streamed attempt, one from the
// table), WithOnDead called once, its attempt log written; and that
// outboxtest refuses the WAL mode db, saying why.
func checkWALDeadLetter(t *testing.T, db *gorm.DB, pub *capture) {
	t.Helper()
	var row outbox.OutboxEvent
	if err := db.Where("event_id = ?", "dies").First(&row).Error; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		db.Where("event_id = ?", "dies").First(&row)
		return row.Status == outbox.StatusDead
	})
	if row.Attempts != 2 || row.LastError == nil {
		t.Errorf("dead event: %d attempts, last error %v; want 2 and the error", row.Attempts, row.LastError)
	}
	pub.mu.Lock()
	if len(pub.dead) != 1 || pub.dead[0] != "dies" {
		t.Errorf("OnDead called for %v, want [dies]", pub.dead)
	}
	pub.mu.Unlock()
	insp, err := relay.NewInspector(db)
	if err != nil {
		t.Fatal(err)
	}
	if att, err := insp.Attempts(t.Context(), "dies"); err != nil || len(att) == 0 {
		t.Errorf("attempt log of the table's retry: %v, %v", att, err)
	}
	// outboxtest reads the table: in WAL mode it refuses, saying why.
	rec := &recordingTB{}
	outboxtest.Emitted(rec, db)
	if !strings.Contains(rec.msg, "WAL mode") {
		t.Errorf("outboxtest.Emitted on a WAL mode db: %q, want a refusal naming WAL mode", rec.msg)
	}
}

// recordingTB records the failure of an outboxtest helper.
type recordingTB struct{ msg string }

func (r *recordingTB) Helper()                        {}
func (r *recordingTB) Errorf(format string, a ...any) { r.msg = fmt.Sprintf(format, a...) }
func (r *recordingTB) FailNow()                       {}
func (r *recordingTB) Logf(string, ...any)            {}

func recorded(evs ...outbox.Event) outbox.Recorder {
	var r outbox.Recorder
	r.Record(evs...)
	return r
}

// waitFor polls cond every 50ms until it holds, or fails t after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
