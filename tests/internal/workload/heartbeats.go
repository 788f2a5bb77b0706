package workload

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
)

// Beats is a snapshot of the relays' heartbeats: each relay row's
// last_beat, by row id (a relay process restarted is a new row).
type Beats map[string]string

// ReadBeats reads the relays' heartbeats.
func ReadBeats(t testing.TB, db *gorm.DB) Beats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.WithContext(ctx).Raw(`SELECT id, last_beat FROM outbox_events_relays`).Rows()
	if err != nil {
		t.Errorf("reading heartbeats: %v", err)
		return nil
	}
	defer rows.Close()
	b := Beats{}
	for rows.Next() {
		var id string
		var beat any
		if err := rows.Scan(&id, &beat); err != nil {
			t.Errorf("reading heartbeats: %v", err)
			return nil
		}
		b[id] = fmt.Sprint(beat)
	}
	if err := rows.Err(); err != nil {
		t.Errorf("reading heartbeats: %v", err)
	}
	return b
}

// Stalled returns the named relays none of whose heartbeat rows changed
// between b and now: their heartbeater stopped (a statement that never
// returns, say), although the relay may still deliver.
func (b Beats) Stalled(now Beats, relays []string) []string {
	var stalled []string
	for _, name := range relays {
		beating := false
		for id, beat := range now {
			if strings.HasPrefix(id, name+"-") && b[id] != beat {
				beating = true
			}
		}
		if !beating {
			stalled = append(stalled, name)
		}
	}
	return stalled
}

// WaitAdvanced waits until every named relay's heartbeat has advanced
// since b, and returns those whose heartbeat did not within timeout.
func (b Beats) WaitAdvanced(t testing.TB, db *gorm.DB, relays []string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		stalled := b.Stalled(ReadBeats(t, db), relays)
		if len(stalled) == 0 || time.Now().After(deadline) {
			return stalled
		}
		time.Sleep(250 * time.Millisecond)
	}
}
