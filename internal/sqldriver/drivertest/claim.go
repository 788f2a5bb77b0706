package drivertest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseClaimer(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	claim := func(t *testing.T, db *gorm.DB, limit int, cursor string) []sqldriver.ClaimedEvent {
		t.Helper()
		rows, err := drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: limit, Lease: time.Minute, Cursor: cursor})
		must(t, err)
		return rows
	}
	ids := func(rows []sqldriver.ClaimedEvent) []string {
		out := make([]string, len(rows))
		for i := range rows {
			out[i] = rows[i].EventID
		}
		slices.Sort(out)
		return out
	}
	want := func(t *testing.T, rows []sqldriver.ClaimedEvent, ids2 ...string) {
		t.Helper()
		slices.Sort(ids2)
		if got := ids(rows); !slices.Equal(got, ids2) {
			t.Fatalf("claimed %v, want %v", got, ids2)
		}
	}
	later := time.Now().Add(time.Hour)
	exerciseKeyedClaims(t, drv, setup, claim, want)

	// A claim takes the due pending and failed events, marks them
	// publishing by the worker for the lease, bumps claim_version and
	// attempts, and returns them as they are after the claim.
	t.Run("ClaimMarks", func(t *testing.T) {
		db := setup(t)
		insert(t, drv, db, false, event("a", "", nil), event("b", "", nil), event("later", "", &later), event("done", "", nil), event("f", "", nil))
		must(t, db.Exec("UPDATE "+Table+" SET status = 'published' WHERE event_id = 'done'").Error)
		must(t, db.Exec("UPDATE "+Table+" SET status = 'failed', attempts = 1, claim_version = 1 WHERE event_id = 'f'").Error)
		rows := claim(t, db, 10, "")
		want(t, rows, "a", "b", "f")
		for _, r := range rows {
			wantV := int64(1)
			if r.EventID == "f" {
				wantV = 2
			}
			if r.ClaimVersion != wantV || r.Attempts != int(wantV) || string(r.Payload) != `{"id":"`+r.EventID+`"}` || r.Type != "t" {
				t.Errorf("claimed %+v, want claim version and attempts %d and the row's payload", r, wantV)
			}
		}
		secs := drv.SecondsSince("locked_until")
		var n int
		must(t, db.Raw("SELECT COUNT(*) FROM "+Table+" WHERE status = 'publishing' AND locked_by = 'w' AND "+secs+" BETWEEN -65 AND -55").Row().Scan(&n))
		if n != 3 {
			t.Fatalf("%d rows publishing by w with a lease of about a minute, want 3", n)
		}
		if rows := claim(t, db, 10, ""); len(rows) != 0 {
			t.Fatalf("claimed %v again", ids(rows))
		}
	})

	// Events without a key come oldest first (available_at, then id).
	t.Run("OldestFirst", func(t *testing.T) {
		db := setup(t)
		t0 := time.Now().Add(-time.Minute)
		t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
		insert(t, drv, db, false, event("third", "", &t2), event("first", "", &t0), event("second", "", &t1))
		want(t, claim(t, db, 2, ""), "first", "second")
		want(t, claim(t, db, 2, ""), "third")
	})

	// Concurrent claims never take the same event, and together take all.
	t.Run("ConcurrentClaimsDisjoint", func(t *testing.T) {
		db := setup(t)
		var rows []sqldriver.EventRow
		for i := range 60 {
			key := ""
			if i%3 == 0 {
				key = string(rune('a' + i%7))
			}
			rows = append(rows, event(string(rune('A'+i/26))+string(rune('a'+i%26)), key, nil))
		}
		insert(t, drv, db, false, rows...)
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for range 200 {
					got, err := drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: 5, Lease: time.Minute})
					if err != nil {
						if drv.ConcurrentWriters() {
							t.Error(err)
							return
						}
						continue // a single-writer database may refuse a concurrent claim
					}
					mu.Lock()
					for _, r := range got {
						seen[r.EventID]++
					}
					mu.Unlock()
					// Finish the events claimed, by primary key as the relay's
					// completion does, so that the next of their key can go.
					// (A table-wide UPDATE would range-lock rows the other
					// claims lock: InnoDB deadlocks the test, not the claim.)
					if len(got) > 0 {
						ids := make([]int64, len(got))
						for i, r := range got {
							ids[i] = r.ID
						}
						must(t, db.Exec("UPDATE "+Table+" SET status = 'published' WHERE id IN ?", ids).Error)
					}
				}
			})
		}
		wg.Wait()
		if len(seen) != 60 {
			t.Fatalf("claimed %d distinct events, want 60", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("event %s claimed %d times", id, n)
			}
		}
	})

	// A claim skips rows another transaction holds locked instead of
	// waiting for them.
	t.Run("SkipsLockedRows", func(t *testing.T) {
		if !drv.ConcurrentWriters() {
			t.Skip("one writer at a time: no row is locked while a claim runs")
		}
		db := setup(t)
		insert(t, drv, db, false, event("held", "", nil), event("free", "", nil), event("k1", "k", nil), event("k2", "k", nil))
		tx := db.Begin()
		defer tx.Rollback()
		must(t, tx.Exec("UPDATE "+Table+" SET attempts = attempts WHERE event_id IN ('held', 'k1')").Error)
		done := make(chan []sqldriver.ClaimedEvent, 1)
		go func() {
			rows, err := drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: 10, Lease: time.Minute})
			if err != nil {
				t.Error(err)
			}
			done <- rows
		}()
		select {
		case rows := <-done:
			want(t, rows, "free")
		case <-time.After(5 * time.Second):
			t.Fatal("the claim waited for the locked rows")
		}
	})
}

func exerciseKeyedClaims(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB,
	claim func(*testing.T, *gorm.DB, int, string) []sqldriver.ClaimedEvent,
	want func(*testing.T, []sqldriver.ClaimedEvent, ...string)) {
	later := time.Now().Add(time.Hour)
	publish := func(t *testing.T, db *gorm.DB, ids ...string) {
		t.Helper()
		must(t, db.Exec("UPDATE "+Table+" SET status = 'published' WHERE event_id IN ?", ids).Error)
	}

	// A key's events go in id order: the head first, then the run behind
	// it up to the first event that is not claimable; a key whose head is
	// publishing waits.
	t.Run("KeyOrder", func(t *testing.T) {
		db := setup(t)
		insert(t, drv, db, false, event("k1", "k", nil), event("k2", "k", nil), event("k3", "k", &later), event("k4", "k", nil))
		want(t, claim(t, db, 1, ""), "k1")
		want(t, claim(t, db, 10, "")) // k1 is publishing: k waits
		publish(t, db, "k1")
		want(t, claim(t, db, 10, ""), "k2") // k3 is not due: the run ends
		publish(t, db, "k2")
		want(t, claim(t, db, 10, "")) // the head k3 is not due
	})

	// Keys share the batch: at most ceil(limit/heads) per key, filled by
	// position in run, events without a key counting as heads.
	t.Run("KeysShareTheBatch", func(t *testing.T) {
		db := setup(t)
		insert(t, drv, db, false, event("a1", "a", nil), event("a2", "a", nil), event("a3", "a", nil),
			event("b1", "b", nil), event("b2", "b", nil), event("b3", "b", nil))
		want(t, claim(t, db, 4, ""), "a1", "a2", "b1", "b2")
	})

	// The walk over the keys starts after the cursor and wraps around.
	t.Run("Cursor", func(t *testing.T) {
		db := setup(t)
		insert(t, drv, db, false, event("a1", "a", nil), event("b1", "b", nil), event("c1", "c", nil))
		want(t, claim(t, db, 1, "a"), "b1")
		want(t, claim(t, db, 1, "c"), "a1") // wraps to the first key
		want(t, claim(t, db, 5, "a"), "c1") // b1 and a1 are publishing
	})
}
