package drivertest

import (
	"database/sql"
	"math"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseClock(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	s := suite{drv: drv, setup: setup}
	t.Run("SecondsSinceNowPlus", s.clockSecondsSinceNowPlus)
	t.Run("WholeMinutesSince", s.clockWholeMinutesSince)
	t.Run("TimeComparesWithNow", s.clockTimeComparesWithNow)
	t.Run("StoredTimeRoundTrip", s.clockStoredTimeRoundTrip)
}

// NowPlus and SecondsSince agree with each other and with real time:
// now minus 90 seconds was 90 seconds ago.
func (s suite) clockSecondsSinceNowPlus(t *testing.T) {
	db := s.setup(t)
	at, a := s.drv.NowPlus(-90 * time.Second)
	var secs float64
	expr(t, db, &secs, s.drv.SecondsSince(at), a...)
	if math.Abs(secs-90) > 2 {
		t.Fatalf("SecondsSince(NowPlus(-90s)) = %v, want 90", secs)
	}
}

// WholeMinutesSince rounds down: 150s ago is 2 minutes, 30s ago 0, and
// 30s ahead -1.
func (s suite) clockWholeMinutesSince(t *testing.T) {
	db := s.setup(t)
	for _, c := range []struct {
		ago  time.Duration
		want int64
	}{{150 * time.Second, 2}, {30 * time.Second, 0}, {-30 * time.Second, -1}, {61*time.Minute + 30*time.Second, 61}} {
		at, a := s.drv.NowPlus(-c.ago)
		var got int64
		expr(t, db, &got, s.drv.WholeMinutesSince(at), a...)
		if got != c.want {
			t.Errorf("WholeMinutesSince(now - %v) = %d, want %d", c.ago, got, c.want)
		}
	}
}

// A bound Time compares with Now as the instants compare, whatever
// the zone of the time.Time: the database clock is the real clock.
func (s suite) clockTimeComparesWithNow(t *testing.T) {
	db := s.setup(t)
	east := time.FixedZone("east", 5*3600)
	now, nowArgs := s.drv.Now()
	for _, c := range []struct {
		at     time.Time
		before bool
	}{
		{time.Now().Add(-time.Minute), true},
		{time.Now().Add(-time.Minute).In(east), true},
		{time.Now().Add(time.Minute), false},
		{time.Now().Add(time.Minute).In(east), false},
	} {
		q, args := cat("CASE WHEN ? <= ", []any{s.drv.Time(c.at)}, now, nowArgs, " THEN 1 ELSE 0 END")
		var got int
		expr(t, db, &got, q, args...)
		if (got == 1) != c.before {
			t.Errorf("%v <= Now() is %v, want %v", c.at, got == 1, c.before)
		}
	}
}

// Times written through the Writer (bound, or the database default)
// read back through StoredTime as the instants written, whatever the
// connection's zone.
func (s suite) clockStoredTimeRoundTrip(t *testing.T) {
	db := s.setup(t)
	at := time.Now().Add(-10 * time.Second).In(time.FixedZone("west", -7*3600)).Truncate(time.Millisecond)
	insert(t, s.drv, db, false, event("bound", "", &at), event("default", "", nil))
	var got, def anyTime
	must(t, db.Raw("SELECT available_at FROM "+Table+" WHERE event_id = ?", "bound").Row().Scan(&got))
	must(t, db.Raw("SELECT available_at FROM "+Table+" WHERE event_id = ?", "default").Row().Scan(&def))
	if g := s.drv.StoredTime(got.t); !g.Equal(at) {
		t.Errorf("StoredTime(bound available_at) = %v, want %v", g, at)
	}
	if d := s.drv.StoredTime(def.t); time.Since(d).Abs() > 5*time.Second {
		t.Errorf("StoredTime(default available_at) = %v, want about now (%v)", d, time.Now())
	}
}

// anyTime scans a time whichever way the database driver returns it.
type anyTime struct{ t time.Time }

func (a *anyTime) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		a.t = x
		return nil
	case []byte:
		return a.parse(string(x))
	case string:
		return a.parse(x)
	}
	var nt sql.NullTime
	if err := nt.Scan(v); err != nil {
		return err
	}
	a.t = nt.Time
	return nil
}

func (a *anyTime) parse(s string) error {
	var err error
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		var t time.Time
		if t, err = time.ParseInLocation(layout, s, time.UTC); err == nil {
			a.t = t
			return nil
		}
	}
	return err
}
