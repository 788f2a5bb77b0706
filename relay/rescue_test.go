package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// sqlLog records every statement GORM runs.
type sqlLog struct {
	logger.Interface
	mu   sync.Mutex
	stmt []string
}

func (l *sqlLog) LogMode(logger.LogLevel) logger.Interface { return l }

func (l *sqlLog) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	l.mu.Lock()
	l.stmt = append(l.stmt, sql)
	l.mu.Unlock()
}

func (l *sqlLog) matching(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.stmt {
		if strings.Contains(s, substr) {
			out = append(out, s)
		}
	}
	return out
}

// A rescue reads no payloads (they can be large, and a rescue does not
// deliver them); OnDead still gets the payload of a rescued event that
// goes dead.
func TestRescueReadsNoPayloads(t *testing.T) {
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			log := &sqlLog{Interface: logger.Discard}
			cfg := testenv.Config()
			cfg.Logger = log
			db := testenv.OpenConfig(t, dialect, cfg)
			must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
			emitN(t, db, 3, func(i int) outbox.Event {
				e := event(i)
				e.Headers = map[string]string{"h": "v"}
				return e
			})
			// A relay claimed them and crashed, on their last attempt.
			must(t, db.Exec(`UPDATE outbox_events SET status = 'publishing', locked_by = 'crashed', locked_until = ?,
				claim_version = 1, attempts = 1`, past(db)).Error)
			var mu sync.Mutex
			got := map[string]*outbox.Envelope{}
			r := newRelay(t, db, newRecorder(), relay.WithMaxAttempts(1),
				relay.WithOnDead(func(_ context.Context, e *outbox.Envelope, _ error) { mu.Lock(); got[e.ID] = e; mu.Unlock() }))
			res, err := r.RunOnce(t.Context())
			must(t, err)
			if res.Claimed != 0 || countStatus(t, db, outbox.StatusDead) != 3 {
				t.Fatalf("%+v, %d dead; want the 3 rescued dead", res, countStatus(t, db, outbox.StatusDead))
			}
			selects := log.matching("WHERE status = 'publishing' AND locked_until <=")
			if len(selects) == 0 {
				t.Fatal("no rescue statement was seen")
			}
			for _, s := range selects {
				if head, _, _ := strings.Cut(s, " FROM "); strings.Contains(head, "*") || strings.Contains(head, "payload") {
					t.Errorf("the rescue reads payloads: %s", s)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range 3 {
				e := got[event(i).ID]
				if e == nil || string(e.Payload) != `{"i":`+string(rune('0'+i))+`}` || e.Headers["h"] != "v" || e.Attempt != 1 || e.Type != "test.event" {
					t.Errorf("OnDead envelope of event %d: %+v", i, e)
				}
			}
		})
	}
}

// logRecords is a slog.Handler that keeps every record at or above Debug.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r)
	l.mu.Unlock()
	return nil
}

// count returns how many records at level hold substr in their message.
func (l *logRecords) count(level slog.Level, substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.records {
		if r.Level == level && strings.Contains(r.Message, substr) {
			n++
		}
	}
	return n
}

// After a relay died holding 1,000 events, its successor logs the rescue
// once per rescue (at most 500 events each), naming the count and the
// relay that held them, with each event at debug level only; and a
// rescued event is not a failure: the successor's heartbeat counts them
// as rescued, none as failed.
func TestRescueLogsOncePerBatchAndCountsRescued(t *testing.T) {
	const n = 1000
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		must(t, db.Exec(`UPDATE outbox_events SET status = 'publishing', locked_by = 'killed', locked_until = ?,
			claim_version = 1, attempts = 1`, past(db)).Error)
		logs := &logRecords{}
		r := newRelay(t, db, newRecorder(), relay.WithLogger(slog.New(logs)), relay.WithHeartbeat(100*time.Millisecond),
			relay.WithLease(2*time.Second), relay.WithWorkerID("successor"))
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		go func() { stopped <- r.Start(ctx) }()
		defer func() { cancel(); must(t, <-stopped) }()
		insp, err := relay.NewInspector(db)
		must(t, err)
		var beat relay.RelayStatus
		for deadline := time.Now().Add(60 * time.Second); beat.Published < n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the successor's heartbeat reads %+v after 60s; want %d published", beat, n)
			}
			stats, err := insp.GetStats(t.Context())
			must(t, err)
			for _, rs := range stats.Relays {
				if rs.ID == "successor" {
					beat = rs
				}
			}
		}
		if beat.Rescued != n || beat.Failed != 0 || beat.Dead != 0 {
			t.Errorf("heartbeat: %d rescued, %d failed, %d dead; want %d rescued, none failed", beat.Rescued, beat.Failed, beat.Dead, n)
		}
		if got := logs.count(slog.LevelWarn, "rescued"); got < 1 || got > n/500 {
			t.Errorf("%d warnings about the rescue of %d events, want one per rescue of at most 500 (%d)", got, n, n/500)
		}
		if got := logs.count(slog.LevelDebug, "rescued an event"); got != n {
			t.Errorf("%d debug lines for rescued events, want %d (one each)", got, n)
		}
	})
}
