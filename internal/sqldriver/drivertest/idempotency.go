package drivertest

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseIdempotency(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	s := suite{drv: drv, setup: setup}
	t.Run("InsertKey", s.idemInsertKey)
	t.Run("TakeOverKey", s.idemTakeOverKey)
}

// InsertKey reports true for the caller whose insert created the
// record, false for every later one (even where the affected-row count
// cannot tell: MySQL's clientFoundRows), and leaves the record alone.
func (s suite) idemInsertKey(t *testing.T) {
	db := s.setup(t)
	for i, c := range []struct {
		p    sqldriver.InsertKeyParams
		want bool
	}{
		{idemKey("k", "running", "first", time.Minute), true},
		{idemKey("k", "running", "second", time.Minute), false},
		{idemKey("k", "succeeded", "fourth", 0), false},
		{idemKey("s", "succeeded", "third", 0), true},
	} {
		must(t, db.Transaction(func(tx *gorm.DB) error {
			got, err := s.drv.InsertKey(tx, c.p)
			if err != nil || got != c.want {
				t.Errorf("insert %d (%s, %s): %v, %v; want %v", i, c.p.Key, c.p.Token, got, err, c.want)
			}
			return nil
		}))
	}
	if r := s.readKey(t, db, "k"); r != (record{"running", "first", 1, 0}) {
		t.Errorf("record k = %+v, want running, first, locked, not expired", r)
	}
	if r := s.readKey(t, db, "s"); r != (record{"succeeded", "third", 0, 0}) {
		t.Errorf("record s = %+v, want succeeded, third, not locked, not expired", r)
	}
}

// TakeOverKey takes only a running record whose lease has expired.
func (s suite) idemTakeOverKey(t *testing.T) {
	db := s.setup(t)
	for _, k := range []string{"live", "expired"} {
		if ok, err := s.drv.InsertKey(db, idemKey(k, "running", "holder", time.Minute)); err != nil || !ok {
			t.Fatalf("InsertKey(%s): %v, %v", k, ok, err)
		}
	}
	if ok, err := s.drv.InsertKey(db, idemKey("done", "succeeded", "holder", 0)); err != nil || !ok {
		t.Fatalf("InsertKey(done): %v, %v", ok, err)
	}
	past, a := s.drv.NowPlus(-time.Second)
	must(t, db.Exec("UPDATE "+IdemTable+" SET locked_until = "+past+" WHERE idempotency_key = ?", append(a, "expired")...).Error)
	take := func(k, status, token string, lockedFor time.Duration) bool {
		ok, err := s.drv.TakeOverKey(db, sqldriver.TakeOverKeyParams{Table: IdemTable, Key: k, Status: status, Token: token, LockedFor: lockedFor, Life: time.Hour})
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
	if r := s.readKey(t, db, "expired"); r != (record{"running", "heir", 1, 0}) {
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
	if r := s.readKey(t, db, "expired"); r != (record{"succeeded", "", 0, 0}) {
		t.Errorf("record = %+v, want succeeded, no token, not locked", r)
	}
	if r := s.readKey(t, db, "live"); r != (record{"running", "holder", 1, 0}) {
		t.Errorf("the live record changed: %+v", r)
	}
}

// idemKey is the InsertKeyParams of key k.
func idemKey(k, status, token string, lockedFor time.Duration) sqldriver.InsertKeyParams {
	return sqldriver.InsertKeyParams{Table: IdemTable, Key: k, Status: status, Token: token, LockedFor: lockedFor, Life: time.Hour}
}

// record is an idempotency record as readKey sees it: Locked 0 (no
// lease), 1 (held) or 2 (expired); Expired 1 once past its life.
type record struct {
	Status, Token string
	Locked        int
	Expired       int
}

// readKey reads the record of key k, judged by the database clock.
func (s suite) readKey(t *testing.T, db *gorm.DB, k string) record {
	t.Helper()
	now, a := s.drv.Now()
	q, args := cat("SELECT status, token, CASE WHEN locked_until IS NULL THEN 0 WHEN locked_until > ", now, a,
		" THEN 1 ELSE 2 END AS locked, CASE WHEN expires_at > ", now, a, " THEN 0 ELSE 1 END AS expired FROM "+IdemTable+" WHERE idempotency_key = ?", []any{k})
	var r record
	must(t, db.Raw(q, args...).Row().Scan(&r.Status, &r.Token, &r.Locked, &r.Expired))
	return r
}
