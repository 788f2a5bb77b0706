package outbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestTrackOptions(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		a, b := &Purchase{Customer: "ann", Status: "new"}, &Purchase{Customer: "bob", Status: "new"}
		must(t, db.Create(a).Error)
		must(t, db.Create(b).Error)
		must(t, db.Model(a).Update("amount", 5).Error)      // filtered out
		must(t, db.Model(a).Update("status", "paid").Error) // kept
		must(t, db.Delete(b).Error)                         // not in TrackOps
		evs := tracked(t, db)
		wantTypes(t, evs, fmt.Sprint("bill.opened ", a.ID), fmt.Sprint("bill.opened ", b.ID), fmt.Sprint("bill.updated ", a.ID))
		for _, e := range evs {
			if e.AggregateType != "bill" || e.Topic != "billing" || !strings.HasPrefix(e.PartitionKey, "customer:") || e.TenantID != "t-"+e.PartitionKey[9:] {
				t.Errorf("event %+v", e)
			}
			if got := string(e.Change.Row); !strings.Contains(got, `"who":`) {
				t.Errorf("row %s, want the mapper's", got)
			}
		}
		if evs[2].PartitionKey != "customer:ann" {
			t.Errorf("partition key %q", evs[2].PartitionKey)
		}
	},
		outbox.TrackName("bill"),
		outbox.TrackEventType(outbox.ChangeCreated, "bill.opened"),
		outbox.TrackOps(outbox.ChangeCreated, outbox.ChangeUpdated),
		outbox.TrackTopic("billing"),
		outbox.TrackPartitionKey(func(p *Purchase) string { return "customer:" + p.Customer }),
		outbox.TrackTenant(func(p *Purchase) string { return "t-" + p.Customer }),
		outbox.TrackPayload(func(p *Purchase) any { return map[string]any{"who": p.Customer, "status": p.Status} }),
		outbox.TrackFilter(func(c *outbox.Change, p *Purchase) bool {
			return c.Op != outbox.ChangeUpdated || (c.Changed("status") && p.Status == "paid")
		}),
	)
}

func TestTrackRefuses(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	if err := outbox.Track(db, &Purchase{}); !errors.Is(err, outbox.ErrNotRegistered) {
		t.Errorf("Track without the plugin: %v, want ErrNotRegistered", err)
	}
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	type noKey struct{ Name string }
	for name, err := range map[string]error{
		"no primary key":  outbox.Track(db, &noKey{}),
		"typed for other": outbox.Track(db, &Purchase{}, outbox.TrackPayload(func(*LedgerEntry) any { return nil })),
		"nil function":    outbox.Track(db, &Purchase{}, outbox.TrackFilter[Purchase](nil)),
		"empty name":      outbox.Track(db, &Purchase{}, outbox.TrackName(" ")),
		"unknown op":      outbox.Track(db, &Purchase{}, outbox.TrackOps("moved")),
		"pointer type":    outbox.Track(db, &Purchase{}, outbox.TrackTenant(func(**Purchase) string { return "" })),
	} {
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	must(t, outbox.Track(db, &Purchase{}))
	if err := outbox.Track(db, &Purchase{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("Track twice: %v, want ErrInvalidConfig", err)
	}
}

// Exec cannot be captured: a debug message names the statement (not its
// values); TrackStrict refuses it, and a create whose inserted rows cannot
// be told apart.
func TestTrackUncaptured(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		logs.Reset()
		must(t, db.Exec("UPDATE purchases SET status = ? WHERE 1 = 0", "secret").Error)
		if s := logs.String(); !strings.Contains(s, "UPDATE purchases SET status") || strings.Contains(s, "secret") {
			t.Errorf("debug log %q, want the statement without its values", s)
		}
		wantTypes(t, tracked(t, db))
	}, outbox.TrackLogger(logger))
}

// (A test runs eachTracked once: testenv's SQLite path is cut at the "#"
// of a repeated subtest name.)
func TestTrackStrict(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		err := db.Exec("DELETE FROM purchases WHERE 1 = 0").Error
		if !errors.Is(err, outbox.ErrUntrackable) {
			t.Errorf("Exec under TrackStrict: %v, want ErrUntrackable", err)
		}
		err = db.Model(&Purchase{}).Create(map[string]any{"customer": "m"}).Error
		if !errors.Is(err, outbox.ErrUntrackable) {
			t.Errorf("create of a map under TrackStrict: %v, want ErrUntrackable", err)
		}
		wantTypes(t, tracked(t, db))
		if n := count(t, db, &Purchase{}); n != 0 {
			t.Errorf("%d purchases, want 0: the refused statement rolled back", n)
		}
	}, outbox.TrackStrict())
}

func TestTrackKey(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		p := &Purchase{Customer: "ann"}
		must(t, db.Create(p).Error)
		must(t, db.Delete(&Purchase{}, p.ID).Error)
		must(t, db.Delete(&Purchase{ID: p.ID}).Error) // already deleted: no event
		id := fmt.Sprint("P-", p.ID)
		evs := tracked(t, db)
		wantTypes(t, evs, "purchase.created "+id, "purchase.deleted "+id)
		if evs[1].PartitionKey != "purchase:"+id {
			t.Errorf("partition key %q", evs[1].PartitionKey)
		}
	}, outbox.TrackKey(func(p *Purchase) string { return fmt.Sprint("P-", p.ID) }))
}
