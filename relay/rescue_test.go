package relay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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
