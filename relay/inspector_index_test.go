package relay_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// The admin page's reads on PostgreSQL read their partial indexes, not
// the published history: each is run on 30,000 rows (30 dead, 29 keys
// each with a failed head and a pending event, the rest published over
// the last ten minutes, 3,000 a minute) with generic plans forced (what
// a prepared statement gets after a few runs, where a bound status
// matches no partial index), and the rows it read from the table are
// counted (pg_stat_xact_user_tables, in one transaction).
func TestInspectorReadsTheIndexes(t *testing.T) {
	db := testenv.Open(t, testenv.Postgres)
	must(t, outbox.Migrate(db))
	must(t, db.Exec(`INSERT INTO outbox_events (event_id, type, status, partition_key, available_at, published_at, created_at)
		SELECT 'ev-' || g, 't',
		       CASE WHEN g % 1000 = 0 THEN 'dead' WHEN g % 1000 = 1 AND g > 1 THEN 'failed'
		            WHEN g % 1000 = 2 AND g > 2 THEN 'pending' ELSE 'published' END,
		       CASE WHEN g % 1000 IN (0, 1, 2) AND g > 2 THEN 'k-' || (g / 1000) ELSE '' END,
		       now() + CASE WHEN g % 1000 = 1 THEN interval '1 hour' ELSE interval '0' END,
		       CASE WHEN g % 1000 IN (0, 1, 2) AND g > 2 THEN NULL ELSE now() - (30000 - g) * interval '20 ms' END,
		       now() - (30000 - g) * interval '20 ms' - interval '1 second'
		FROM generate_series(1, 30000) g`).Error)
	must(t, db.Exec("ANALYZE outbox_events").Error)
	ctx := t.Context()
	// reads runs each read in one transaction, with one Inspector, and
	// checks the rows each read against its budget.
	reads := func(t *testing.T, budgets []int64, read func(insp *relay.Inspector)) {
		t.Helper()
		must(t, db.Transaction(func(tx *gorm.DB) error {
			must(t, tx.Exec("SET LOCAL plan_cache_mode = force_generic_plan").Error)
			rowsRead := func() (n int64) {
				must(t, tx.Raw("SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables WHERE relid = 'outbox_events'::regclass").Scan(&n).Error)
				return n
			}
			insp := inspector(t, tx)
			for k, budget := range budgets {
				before := rowsRead()
				read(insp)
				if n := rowsRead() - before; n > budget {
					t.Errorf("read %d: %d rows of 30,000, want at most %d: a scan of the published history", k+1, n, budget)
				}
			}
			return nil
		}))
	}
	t.Run("CountDead", func(t *testing.T) {
		reads(t, []int64{100}, func(insp *relay.Inspector) {
			n, err := insp.CountEvents(ctx, relay.EventQuery{Status: outbox.StatusDead})
			must(t, err)
			if n != 30 {
				t.Errorf("%d dead, want 30", n)
			}
		})
	})
	t.Run("ListDead", func(t *testing.T) {
		reads(t, []int64{100}, func(insp *relay.Inspector) {
			page, err := insp.ListEvents(ctx, relay.EventQuery{Status: outbox.StatusDead, Newest: true, Filter: relay.Filter{Limit: 10}})
			must(t, err)
			if len(page.Events) != 10 || page.Events[0].EventID != "ev-30000" || page.Next == 0 {
				t.Errorf("dead page: %d events, next %d", len(page.Events), page.Next)
			}
		})
	})
	t.Run("Key", func(t *testing.T) {
		reads(t, []int64{100}, func(insp *relay.Inspector) {
			page, err := insp.ListEvents(ctx, relay.EventQuery{Unfinished: true, Filter: relay.Filter{PartitionKey: "k-7"}})
			must(t, err)
			var got []string
			for _, e := range page.Events {
				got = append(got, e.EventID+"/"+string(e.Status))
			}
			if len(got) != 3 || got[0] != "ev-7000/dead" || got[1] != "ev-7001/failed" || got[2] != "ev-7002/pending" {
				t.Errorf("key k-7 lists %v, want its dead, failed and pending events in id order", got)
			}
		})
	})
	t.Run("Stats", func(t *testing.T) {
		reads(t, []int64{10500}, func(insp *relay.Inspector) {
			s, err := insp.GetStats(ctx)
			must(t, err)
			c := s.Counts
			if c[outbox.StatusDead] != 30 || c[outbox.StatusFailed] != 29 || c[outbox.StatusPending] != 29 {
				t.Errorf("counts %v, want 30 dead, 29 failed, 29 pending", c)
			}
			if !s.PublishedEstimated || c[outbox.StatusPublished] < 25000 || c[outbox.StatusPublished] > 35000 {
				t.Errorf("published %d (estimated %v), want an estimate near 29,912", c[outbox.StatusPublished], s.PublishedEstimated)
			}
			if s.OldestPendingAge <= 0 {
				t.Errorf("oldest pending age %v, want > 0", s.OldestPendingAge)
			}
		})
	})
	t.Run("Throughput", func(t *testing.T) {
		// The first call counts the hour's publications once (and the lag
		// of 500 of each minute); the next one reads only the current
		// minute's (and the last one's in its first 10 seconds).
		reads(t, []int64{30000 + 10*500 + 500, 2*(3000+500) + 500}, func(insp *relay.Inspector) {
			minutes, err := insp.Throughput(ctx, time.Hour)
			must(t, err)
			var total int64
			for _, m := range minutes {
				total += m.Published
				if m.Estimated || m.MinutesAgo > 11 && m.Published != 0 {
					t.Errorf("%d minutes ago: %+v, want none, counted", m.MinutesAgo, m)
				}
				if m.MinutesAgo >= 2 && m.MinutesAgo <= 8 && (m.Published < 2985 || m.Published > 3000 || m.AvgLag < 500*time.Millisecond) {
					t.Errorf("%d minutes ago: %+v, want about 3,000, lag about 1s", m.MinutesAgo, m)
				}
			}
			if total != 29912 {
				t.Errorf("%d published in the last hour, want 29,912", total)
			}
		})
	})
}

// Every minute is counted exactly, on every database: 20 a second for
// three minutes read as 1,200 a minute, with their lag.
func TestThroughputCountsBusyMinutes(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		now := time.Now().UTC()
		from := now.Add(-200 * time.Second)
		publishBurst(t, db, "b", 3600, from, from.Add(180*time.Second), 2*time.Second)
		minutes, err := inspector(t, db).Throughput(t.Context(), time.Hour)
		must(t, err)
		var total int64
		for _, m := range minutes {
			total += m.Published
			want := int64(0)
			for i := range 3600 {
				if at := from.Add(time.Duration(i) * 50 * time.Millisecond); !at.Before(m.Start) && at.Before(m.Start.Add(time.Minute)) {
					want++
				}
			}
			if m.Published != want || m.Estimated || (want > 0 && (m.AvgLag < 1500*time.Millisecond || m.AvgLag > 2500*time.Millisecond)) {
				t.Errorf("the minute from %v: %+v, want %d, lag 2s", m.Start, m, want)
			}
		}
		if total != 3600 {
			t.Errorf("%d in the hour, want 3,600", total)
		}
	})
}
