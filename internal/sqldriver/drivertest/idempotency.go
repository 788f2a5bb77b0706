package drivertest

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseIdempotency(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	key := func(k, status, token string, lockedFor time.Duration) sqldriver.InsertKeyParams {
		return sqldriver.InsertKeyParams{Table: IdemTable, Key: k, Status: status, Token: token, LockedFor: lockedFor, Life: time.Hour}
	}
	type record struct {
		Status, Token string
		Locked        int
		Expired       int
	}
	read := func(t *testing.T, db *gorm.DB, k string) record {
		t.Helper()
		now, a := drv.Now()
		q, args := cat("SELECT status, token, CASE WHEN locked_until IS NULL THEN 0 WHEN locked_until > ", now, a,
			" THEN 1 ELSE 2 END AS locked, CASE WHEN expires_at > ", now, a, " THEN 0 ELSE 1 END AS expired FROM "+IdemTable+" WHERE idempotency_key = ?", []any{k})
		var r record
		must(t, db.Raw(q, args...).Row().Scan(&r.Status, &r.Token, &r.Locked, &r.Expired))
		return r
	}

	// InsertKey reports true for the caller whose insert created the
	// record, false for every later one (even where the affected-row count
	// cannot tell: MySQL's clientFoundRows), and leaves the record alone.
	t.Run("InsertKey", func(t *testing.T) {
		db := setup(t)
		for i, c := range []struct {
			p    sqldriver.InsertKeyParams
			want bool
		}{
			{key("k", "running", "first", time.Minute), true},
			{key("k", "running", "second", time.Minute), false},
			{key("k", "succeeded", "fourth", 0), false},
			{key("s", "succeeded", "third", 0), true},
		} {
			must(t, db.Transaction(func(tx *gorm.DB) error {
				got, err := drv.InsertKey(tx, c.p)
				if err != nil || got != c.want {
					t.Errorf("insert %d (%s, %s): %v, %v; want %v", i, c.p.Key, c.p.Token, got, err, c.want)
				}
				return nil
			}))
		}
		if r := read(t, db, "k"); r != (record{"running", "first", 1, 0}) {
			t.Errorf("record k = %+v, want running, first, locked, not expired", r)
		}
		if r := read(t, db, "s"); r != (record{"succeeded", "third", 0, 0}) {
			t.Errorf("record s = %+v, want succeeded, third, not locked, not expired", r)
		}
	})

	// TakeOverKey takes only a running record whose lease has expired.
	t.Run("TakeOverKey", func(t *testing.T) {
		db := setup(t)
		for _, k := range []string{"live", "expired"} {
			if ok, err := drv.InsertKey(db, key(k, "running", "holder", time.Minute)); err != nil || !ok {
				t.Fatalf("InsertKey(%s): %v, %v", k, ok, err)
			}
		}
		if ok, err := drv.InsertKey(db, key("done", "succeeded", "holder", 0)); err != nil || !ok {
			t.Fatalf("InsertKey(done): %v, %v", ok, err)
		}
		past, a := drv.NowPlus(-time.Second)
		must(t, db.Exec("UPDATE "+IdemTable+" SET locked_until = "+past+" WHERE idempotency_key = ?", append(a, "expired")...).Error)
		take := func(k, status, token string, lockedFor time.Duration) bool {
			ok, err := drv.TakeOverKey(db, sqldriver.TakeOverKeyParams{Table: IdemTable, Key: k, Status: status, Token: token, LockedFor: lockedFor, Life: time.Hour})
			must(t, err)
			return ok
		}
		if take("live", "running", "thief", time.Minute) {
			t.Error("took over a key whose lease lasts")
		}
		if take("done", "running", "thief", time.Minute) {
			t.Error("took over a succeeded key")
		}
		if take("missing", "running", "thief", time.Minute) {
			t.Error("took over a key that does not exist")
		}
		if !take("expired", "running", "heir", time.Minute) {
			t.Fatal("did not take over a key whose lease expired")
		}
		if r := read(t, db, "expired"); r != (record{"running", "heir", 1, 0}) {
			t.Errorf("taken-over record = %+v, want running, heir, locked again", r)
		}
		if take("expired", "running", "second heir", time.Minute) {
			t.Error("took over a key another caller just took over")
		}
		// A takeover to succeeded clears the lease.
		must(t, db.Exec("UPDATE "+IdemTable+" SET locked_until = "+past+" WHERE idempotency_key = ?", append(a, "expired")...).Error)
		if !take("expired", "succeeded", "", 0) {
			t.Fatal("did not take over to succeeded")
		}
		if r := read(t, db, "expired"); r != (record{"succeeded", "", 0, 0}) {
			t.Errorf("record = %+v, want succeeded, no token, not locked", r)
		}
		if r := read(t, db, "live"); r != (record{"running", "holder", 1, 0}) {
			t.Errorf("the live record changed: %+v", r)
		}
	})
}
