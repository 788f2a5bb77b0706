package drivertest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseClaimer(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	exerciseKeyedClaims(t, drv, setup)
	s := suite{drv: drv, setup: setup}
	t.Run("ClaimMarks", s.claimerClaimMarks)
	t.Run("OldestFirst", s.claimerOldestFirst)
	t.Run("ConcurrentClaimsDisjoint", s.claimerConcurrentClaimsDisjoint)
	t.Run("SkipsLockedRows", s.claimerSkipsLockedRows)
}

// A claim takes the due pending and failed events, marks them
// publishing by the worker for the lease, bumps claim_version and
// attempts, and returns them as they are after the claim.
func (s suite) claimerClaimMarks(t *testing.T) {
	later := time.Now().Add(time.Hour)
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a", "", nil), event("b", "", nil), event("later", "", &later), event("done", "", nil), event("f", "", nil))
	must(t, db.Exec("UPDATE "+Table+" SET status = 'published' WHERE event_id = 'done'").Error)
	must(t, db.Exec("UPDATE "+Table+" SET status = 'failed', attempts = 1, claim_version = 1 WHERE event_id = 'f'").Error)
	rows := s.claim(t, db, 10, "")
	wantClaimed(t, rows, "a", "b", "f")
	for _, r := range rows {
		wantV := int64(1)
		if r.EventID == "f" {
			wantV = 2
		}
		if r.ClaimVersion != wantV || r.Attempts != int(wantV) || string(r.Payload) != `{"id":"`+r.EventID+`"}` || r.Type != "t" {
			t.Errorf("claimed %+v, want claim version and attempts %d and the row's payload", r, wantV)
		}
	}
	secs := s.drv.SecondsSince("locked_until")
	var n int
	must(t, db.Raw("SELECT COUNT(*) FROM "+Table+" WHERE status = 'publishing' AND locked_by = 'w' AND "+secs+" BETWEEN -65 AND -55").Row().Scan(&n))
	if n != 3 {
		t.Fatalf("%d rows publishing by w with a lease of about a minute, want 3", n)
	}
	if rows := s.claim(t, db, 10, ""); len(rows) != 0 {
		t.Fatalf("claimed %v again", claimedIDs(rows))
	}
}

// Events without a key come oldest first (available_at, then id).
func (s suite) claimerOldestFirst(t *testing.T) {
	db := s.setup(t)
	t0 := time.Now().Add(-time.Minute)
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	insert(t, s.drv, db, false, event("third", "", &t2), event("first", "", &t0), event("second", "", &t1))
	wantClaimed(t, s.claim(t, db, 2, ""), "first", "second")
	wantClaimed(t, s.claim(t, db, 2, ""), "third")
}

// Concurrent claims never take the same event, and together take all.
func (s suite) claimerConcurrentClaimsDisjoint(t *testing.T) {
	db := s.setup(t)
	var rows []sqldriver.EventRow
	for i := range 60 {
		key := ""
		if i%3 == 0 {
			key = string(rune('a' + i%7))
		}
		rows = append(rows, event(string(rune('A'+i/26))+string(rune('a'+i%26)), key, nil))
	}
	insert(t, s.drv, db, false, rows...)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for range 200 {
				got, err := s.drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: 5, Lease: time.Minute})
				if err != nil {
					if s.drv.ConcurrentWriters() {
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
}

// A claim skips rows another transaction holds locked instead of
// waiting for them.
func (s suite) claimerSkipsLockedRows(t *testing.T) {
	if !s.drv.ConcurrentWriters() {
		t.Skip("one writer at a time: no row is locked while a claim runs")
	}
	db := s.setup(t)
	insert(t, s.drv, db, false, event("held", "", nil), event("free", "", nil), event("k1", "k", nil), event("k2", "k", nil))
	tx := db.Begin()
	defer tx.Rollback()
	must(t, tx.Exec("UPDATE "+Table+" SET attempts = attempts WHERE event_id IN ('held', 'k1')").Error)
	done := make(chan []sqldriver.ClaimedEvent, 1)
	go func() {
		rows, err := s.drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- rows
	}()
	select {
	case rows := <-done:
		wantClaimed(t, rows, "free")
	case <-time.After(5 * time.Second):
		t.Fatal("the claim waited for the locked rows")
	}
}

func exerciseKeyedClaims(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	s := suite{drv: drv, setup: setup}
	t.Run("KeyOrder", s.keyedKeyOrder)
	t.Run("KeysShareTheBatch", s.keyedKeysShareTheBatch)
	t.Run("Cursor", s.keyedCursor)
	t.Run("Heads", s.keyedHeads)
	t.Run("RunsThroughStates", s.keyedRunsThroughStates)
	t.Run("DeepKeysFillTheBatch", s.keyedDeepKeysFillTheBatch)
	t.Run("RunsPastABlockedKey", s.keyedRunsPastABlockedKey)
}

// A key's events go in id order: the head first, then the run behind
// it up to the first event that is not claimable; a key whose head is
// publishing waits.
func (s suite) keyedKeyOrder(t *testing.T) {
	later := time.Now().Add(time.Hour)
	db := s.setup(t)
	insert(t, s.drv, db, false, event("k1", "k", nil), event("k2", "k", nil), event("k3", "k", &later), event("k4", "k", nil))
	wantClaimed(t, s.claim(t, db, 1, ""), "k1")
	wantClaimed(t, s.claim(t, db, 10, "")) // k1 is publishing: k waits
	publishIDs(t, db, "k1")
	wantClaimed(t, s.claim(t, db, 10, ""), "k2") // k3 is not due: the run ends
	publishIDs(t, db, "k2")
	wantClaimed(t, s.claim(t, db, 10, "")) // the head k3 is not due
}

// Keys share the batch: at most ceil(limit/heads) per key, filled by
// position in run, events without a key counting as heads.
func (s suite) keyedKeysShareTheBatch(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a1", "a", nil), event("a2", "a", nil), event("a3", "a", nil),
		event("b1", "b", nil), event("b2", "b", nil), event("b3", "b", nil))
	wantClaimed(t, s.claim(t, db, 4, ""), "a1", "a2", "b1", "b2")
}

// The walk over the keys starts after the cursor and wraps around.
func (s suite) keyedCursor(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a1", "a", nil), event("b1", "b", nil), event("c1", "c", nil))
	wantClaimed(t, s.claim(t, db, 1, "a"), "b1")
	wantClaimed(t, s.claim(t, db, 1, "c"), "a1") // wraps to the first key
	wantClaimed(t, s.claim(t, db, 5, "a"), "c1") // b1 and a1 are publishing
}

// Heads bounds the keys a claim takes; each of them then gets a longer
// run (ceil(limit/heads)), and events without a key still fill the batch.
func (s suite) keyedHeads(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a1", "a", nil), event("a2", "a", nil), event("a3", "a", nil),
		event("b1", "b", nil), event("b2", "b", nil), event("b3", "b", nil),
		event("c1", "c", nil), event("c2", "c", nil), event("c3", "c", nil), event("u1", "", nil))
	claim := func(limit, heads int, cursor string) []sqldriver.ClaimedEvent {
		t.Helper()
		rows, err := s.drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: limit, Heads: heads,
			Lease: time.Minute, Cursor: cursor})
		must(t, err)
		return rows
	}
	wantClaimed(t, claim(5, 2, ""), "a1", "b1", "u1", "a2", "b2")
	wantClaimed(t, claim(10, 1, "b"), "c1", "c2", "c3")
	publishIDs(t, db, "a1", "a2", "c1", "c2", "c3")
	// a's head is a3; b's (b1) is publishing. One key after the cursor c:
	// the walk wraps to a.
	wantClaimed(t, claim(10, 1, "c"), "a3")
}

// A run goes on through failed events that are due, behind a pending
// head or a failed one, and ends at the first publishing one (behind a
// head that was replayed, say).
func (s suite) keyedRunsThroughStates(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a1", "a", nil), event("a2", "a", nil), event("a3", "a", nil),
		event("b1", "b", nil), event("b2", "b", nil), event("b3", "b", nil),
		event("c1", "c", nil), event("c2", "c", nil), event("c3", "c", nil))
	must(t, db.Exec("UPDATE "+Table+" SET status = 'publishing' WHERE event_id = 'a2'").Error)
	must(t, db.Exec("UPDATE "+Table+" SET status = 'failed' WHERE event_id IN ('b2', 'c1', 'c2')").Error)
	wantClaimed(t, s.claim(t, db, 12, ""), "a1", "b1", "b2", "b3", "c1", "c2", "c3")
}

// Keys far deeper than the batch share it evenly, each run whole up to
// its cap, and in order.
func (s suite) keyedDeepKeysFillTheBatch(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, append(keyEvents("a", 1, 250), keyEvents("b", 1, 250)...)...)
	want := append(eventIDs("a", 1, 50), eventIDs("b", 1, 50)...)
	wantClaimed(t, s.claim(t, db, 100, ""), want...)
}

// A key whose head is publishing is skipped however deep its backlog
// (here 12 and 100 events behind the head), and the keys after it still
// get their whole runs.
func (s suite) keyedRunsPastABlockedKey(t *testing.T) {
	for _, behind := range []int{12, 100} {
		db := s.setup(t)
		insert(t, s.drv, db, false, event("b1", "b", nil))
		wantClaimed(t, s.claim(t, db, 1, ""), "b1")
		rows := append(keyEvents("a", 1, 5), keyEvents("b", 2, 1+behind)...)
		insert(t, s.drv, db, false, append(rows, keyEvents("c", 1, 5)...)...)
		want := append(eventIDs("a", 1, 5), eventIDs("c", 1, 5)...)
		wantClaimed(t, s.claim(t, db, 10, ""), want...)
	}
}

// keyEvents returns events of key from key<first> to key<last>, due now.
func keyEvents(key string, first, last int) []sqldriver.EventRow {
	var out []sqldriver.EventRow
	for _, id := range eventIDs(key, first, last) {
		out = append(out, event(id, key, nil))
	}
	return out
}

// eventIDs returns the event ids key<first> to key<last>.
func eventIDs(key string, first, last int) []string {
	var out []string
	for i := first; i <= last; i++ {
		out = append(out, fmt.Sprint(key, i))
	}
	return out
}

// claim claims up to limit events for worker "w" for a minute, starting
// the walk over the keys after cursor.
func (s suite) claim(t *testing.T, db *gorm.DB, limit int, cursor string) []sqldriver.ClaimedEvent {
	t.Helper()
	rows, err := s.drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: limit, Lease: time.Minute, Cursor: cursor})
	must(t, err)
	return rows
}

// claimedIDs returns the event ids of rows, sorted.
func claimedIDs(rows []sqldriver.ClaimedEvent) []string {
	out := make([]string, len(rows))
	for i := range rows {
		out[i] = rows[i].EventID
	}
	slices.Sort(out)
	return out
}

// wantClaimed fails t unless rows are the events ids, in any order.
func wantClaimed(t *testing.T, rows []sqldriver.ClaimedEvent, ids ...string) {
	t.Helper()
	slices.Sort(ids)
	if got := claimedIDs(rows); !slices.Equal(got, ids) {
		t.Fatalf("claimed %v, want %v", got, ids)
	}
}

// publishIDs marks the events ids published.
func publishIDs(t *testing.T, db *gorm.DB, ids ...string) {
	t.Helper()
	must(t, db.Exec("UPDATE "+Table+" SET status = 'published' WHERE event_id IN ?", ids).Error)
}
