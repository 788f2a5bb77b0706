package relay_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/oteltest"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// tzChildEnv marks the test process that TestLocalTimeZone starts in
// another time zone.
const tzChildEnv = "OUTBOX_TEST_TZ_CHILD"

// In a process whose local zone is not UTC, with MySQL opened with
// loc=Local (GORM's documented DSN), every time the library reads back is
// the instant it stored: the envelope's CreatedAt, the lag metric, the
// rows read through GORM, the dead list and the heartbeats; availability
// and leases compare correctly. The test runs itself again with
// TZ=Asia/Kolkata (UTC+5:30): the zone of a process cannot change safely
// while it runs.
func TestLocalTimeZone(t *testing.T) {
	if os.Getenv(tzChildEnv) == "" {
		runInZone(t, "Asia/Kolkata")
		return
	}
	if _, off := time.Now().Zone(); off == 0 {
		t.Fatalf("TZ=%q did not change the local zone (is tzdata installed?)", os.Getenv("TZ"))
	}
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			var db *gorm.DB
			if d == testenv.MySQL {
				db = testenv.OpenMySQL(t, func(c *mysql.Config) { c.Loc = time.Local })
			} else {
				db = testenv.Open(t, d)
			}
			checkLocalTimes(t, db)
		})
	}
}

// runInZone runs TestLocalTimeZone in a child process with TZ=zone.
func runInZone(t *testing.T, zone string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLocalTimeZone$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TZ="+zone, tzChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("TestLocalTimeZone with TZ=%s: %v\n%s", zone, err, out)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skipf("skipped with TZ=%s:\n%s", zone, out)
	}
	t.Logf("TZ=%s:\n%s", zone, out)
}

// within fails t unless got lies in [from-slack, to+slack].
func within(t *testing.T, what string, got, from, to time.Time) {
	t.Helper()
	const slack = 2 * time.Second
	if got.Before(from.Add(-slack)) || got.After(to.Add(slack)) {
		t.Errorf("%s = %v, want between %v and %v (off by %v)", what, got.UTC(), from.UTC(), to.UTC(), got.Sub(from).Round(time.Minute))
	}
}

func checkLocalTimes(t *testing.T, db *gorm.DB) {
	ctx := t.Context()
	must(t, db.Use(&outbox.Plugin{}))
	must(t, outbox.Migrate(db))
	before := time.Now()
	later := before.Add(time.Hour)
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx,
			outbox.Event{ID: "now", Type: "t"},
			outbox.Event{ID: "later", Type: "t", AvailableAt: later})
	}))
	after := time.Now()

	// The claim: only the event that is due; its lease, envelope and lag.
	const lease = time.Minute
	mp := oteltest.NewMeterProvider()
	var env *outbox.Envelope
	var claimed outbox.OutboxEvent
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		env, claimed = e, statusOf(t, db, e.ID)
		if e.ID == "dead" {
			return outbox.Permanent(errors.New("no"))
		}
		return nil
	})
	r := newRelay(t, db, pub, relay.WithLease(lease), relay.WithHeartbeat(0),
		relay.WithMeterProvider(mp))
	res, err := r.RunOnce(ctx)
	must(t, err)
	if res.Claimed != 1 || res.Published != 1 || env == nil || env.ID != "now" {
		t.Fatalf("RunOnce: %+v, delivered %+v; want the one due event published", res, env)
	}
	within(t, "Envelope.CreatedAt", env.CreatedAt, before, after)
	if claimed.LockedUntil == nil {
		t.Fatal("the claimed row has no locked_until")
	}
	within(t, "locked_until while publishing", *claimed.LockedUntil, before.Add(lease), time.Now().Add(lease))
	lag := metricsOf(t, mp)["outbox.event.lag"]
	if lag.Kind != "Float64Histogram" || len(lag.Points) != 1 || lag.Points[0].Count != 1 || lag.Points[0].Value > 60 {
		t.Errorf("lag metric %+v, want one event published within a minute of its commit", lag)
	}

	// Rows read through GORM.
	row := statusOf(t, db, "now")
	within(t, "created_at", row.CreatedAt, before, after)
	within(t, "available_at", row.AvailableAt, before, after)
	if row.PublishedAt == nil {
		t.Fatal("published_at is NULL")
	}
	within(t, "published_at", *row.PublishedAt, before, time.Now())
	within(t, "available_at of a later event", statusOf(t, db, "later").AvailableAt, later, later)

	// The dead list.
	must(t, db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{ID: "dead", Type: "t"}) }))
	res, err = r.RunOnce(ctx)
	must(t, err)
	if res.Dead != 1 {
		t.Fatalf("RunOnce: %+v, want the event dead", res)
	}
	dead, err := inspector(t, db).ListDead(ctx, relay.Filter{})
	must(t, err)
	if len(dead) != 1 {
		t.Fatalf("ListDead: %d events, want 1", len(dead))
	}
	within(t, "created_at of a dead event", dead[0].CreatedAt, before, time.Now())

	checkLeaseTimes(t, db, before)
	checkHeartbeatTimes(t, db)
}

// checkLeaseTimes makes one lease expired and another running, by the
// database clock: the rescue takes the first only, and the envelope it
// reports carries the stored creation time.
func checkLeaseTimes(t *testing.T, db *gorm.DB, before time.Time) {
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: "crashed", Type: "t"}, outbox.Event{ID: "running", Type: "t"})
	}))
	k, err := dialect.Of(db)
	must(t, err)
	for id, d := range map[string]time.Duration{"crashed": -time.Second, "running": time.Minute} {
		until, args := k.NowPlus(d)
		must(t, db.Exec("UPDATE "+outbox.DefaultTableName+" SET status = 'publishing', locked_by = 'gone', attempts = 1, max_attempts = 1, locked_until = "+until+
			" WHERE event_id = ?", append(args, id)...).Error)
	}
	reported := make(chan *outbox.Envelope, 2)
	r := newRelay(t, db, nopPublisher, relay.WithHeartbeat(0),
		relay.WithOnDead(func(_ context.Context, e *outbox.Envelope, _ error) { reported <- e }))
	_, err = r.RunOnce(t.Context())
	must(t, err)
	if s := statusOf(t, db, "crashed").Status; s != outbox.StatusDead {
		t.Errorf("event with an expired lease is %s, want dead", s)
	}
	if s := statusOf(t, db, "running").Status; s != outbox.StatusPublishing {
		t.Errorf("event with a running lease is %s, want publishing", s)
	}
	select {
	case e := <-reported:
		within(t, "CreatedAt of a rescued event", e.CreatedAt, before, time.Now())
	default:
		t.Error("the rescued event was not reported dead")
	}
}

// checkHeartbeatTimes runs a relay with heartbeats and reads them back.
func checkHeartbeatTimes(t *testing.T, db *gorm.DB) {
	ctx, cancel := context.WithCancel(t.Context())
	started := time.Now()
	r := newRelay(t, db, nopPublisher, relay.WithHeartbeat(100*time.Millisecond), relay.WithPollInterval(50*time.Millisecond))
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		must(t, <-done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := inspector(t, db).GetStats(ctx)
		must(t, err)
		if len(st.Relays) == 1 {
			hb := st.Relays[0]
			within(t, "RelayStatus.StartedAt", hb.StartedAt, started, time.Now())
			within(t, "RelayStatus.LastBeat", hb.LastBeat, started, time.Now())
			if !hb.Live {
				t.Errorf("relay not live: %+v", hb)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
