package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// statsJSON is the stable JSON of "outbox stats".
type statsJSON struct {
	Table                   string           `json:"table"`
	Counts                  map[string]int64 `json:"counts"`
	OldestPendingAgeSeconds float64          `json:"oldest_pending_age_seconds"`
	// PublishedEstimated: counts.published is the database's estimate
	// (PostgreSQL, more than 10,000 published events), not a count.
	PublishedEstimated bool        `json:"published_estimated"`
	Relays             []relayJSON `json:"relays"`
	// WAL is the replication slot of WAL mode, absent without one.
	WAL *walJSON `json:"wal,omitempty"`
	// Warnings name setups that lose track of events, such as live relays
	// of this table that deliver to different places.
	Warnings []string `json:"warnings"`
}

// walJSON is the health of WAL mode's replication slot.
type walJSON struct {
	Slot   string `json:"slot"`
	Status string `json:"wal_status"`
	Active bool   `json:"active"`
	// LagBytes is the WAL the server keeps for the slot; SafeBytes what
	// may still be written before it is invalidated (-1: no limit).
	LagBytes                   int64   `json:"lag_bytes"`
	SafeBytes                  int64   `json:"safe_bytes"`
	OldestUnconfirmedAgeSecond float64 `json:"oldest_unconfirmed_age_seconds"`
	Streamer                   string  `json:"streamer,omitempty"`
	Warning                    string  `json:"warning,omitempty"`
}

type relayJSON struct {
	ID        string `json:"id"`
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	Publisher string `json:"publisher"`
	// Role is "active" or "standby" for a relay run with
	// relay.WithSingleActive, absent for the others.
	Role           string    `json:"role,omitempty"`
	Live           bool      `json:"live"`
	StartedAt      time.Time `json:"started_at"`
	LastBeat       time.Time `json:"last_beat"`
	LastBeatAgeSec float64   `json:"last_beat_age_seconds"`
	// HeartbeatSec is how often the relay records itself: its counts lag
	// its work by up to that long.
	HeartbeatSec float64 `json:"heartbeat_seconds"`
	Claimed      int64   `json:"claimed"`
	Published    int64   `json:"published"`
	Failed       int64   `json:"failed"`
	Dead         int64   `json:"dead"`
	Lost         int64   `json:"lost"`
	Rescued      int64   `json:"rescued"` // expired claims it took back: not failures
}

var statuses = []outbox.Status{outbox.StatusPending, outbox.StatusPublishing, outbox.StatusPublished, outbox.StatusFailed, outbox.StatusDead}

func runStats(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "stats", "stats [flags]",
		"Counts the events per status, measures how long the oldest deliverable pending\n"+
			"event has waited, and lists the relays that recorded heartbeats, live or stale,\n"+
			"with where each delivers (its publisher) and its counts as of its last heartbeat.\n"+
			"In WAL mode, reports the replication slot: its wal_status, lag in bytes, the age\n"+
			"of its oldest unconfirmed commit, and the streaming relay.\n"+
			"Warns when live relays of the table deliver to different places, and when the\n"+
			"slot is past its warning thresholds or invalidated.").withJSON()
	if err := f.parse(args); err != nil {
		return err
	}
	insp, err := f.inspect(ctx)
	if err != nil {
		return err
	}
	s, err := insp.GetStats(ctx)
	if err != nil {
		return err
	}
	out := statsJSON{Table: f.table, Counts: map[string]int64{}, OldestPendingAgeSeconds: s.OldestPendingAge.Seconds(),
		PublishedEstimated: s.PublishedEstimated, Relays: []relayJSON{}, Warnings: []string{}}
	for _, st := range statuses {
		out.Counts[string(st)] = s.Counts[st]
	}
	for _, r := range s.Relays {
		out.Relays = append(out.Relays, relayJSON{ID: r.ID, Host: r.Host, PID: r.PID, Publisher: r.Publisher, Role: r.Role, Live: r.Live,
			StartedAt: r.StartedAt.UTC(), LastBeat: r.LastBeat.UTC(), LastBeatAgeSec: r.Age.Seconds(),
			HeartbeatSec: r.Heartbeat.Seconds(), Claimed: r.Claimed, Published: r.Published, Failed: r.Failed, Dead: r.Dead, Lost: r.Lost, Rescued: r.Rescued})
	}
	if w := publisherWarning(s.Relays); w != "" {
		out.Warnings = append(out.Warnings, w)
	}
	if ws := s.WAL; ws != nil {
		out.WAL = &walJSON{Slot: ws.Slot, Status: ws.Status, Active: ws.Active, LagBytes: ws.LagBytes, SafeBytes: ws.SafeBytes,
			OldestUnconfirmedAgeSecond: ws.OldestUnconfirmedAge.Seconds(), Streamer: ws.Streamer, Warning: ws.Warning}
		if ws.Warning != "" {
			out.Warnings = append(out.Warnings, "WAL mode, slot "+ws.Slot+": "+ws.Warning)
		}
	}
	if f.json {
		return writeJSON(c, out)
	}
	printStats(c, f.table, s, out.Warnings)
	return nil
}

// publisherWarning says when live relays deliver to different places:
// they split the table's events between them.
func publisherWarning(relays []relay.RelayStatus) string {
	seen := map[string][]string{}
	var order []string
	for _, r := range relays {
		if !r.Live {
			continue
		}
		if _, ok := seen[r.Publisher]; !ok {
			order = append(order, r.Publisher)
		}
		seen[r.Publisher] = append(seen[r.Publisher], r.ID)
	}
	if len(order) < 2 {
		return ""
	}
	parts := make([]string, len(order))
	for i, p := range order {
		parts[i] = fmt.Sprintf("%q (%s)", p, strings.Join(seen[p], ", "))
	}
	return "live relays deliver to different places, splitting the events between them: " + strings.Join(parts, "; ")
}

func printStats(c *cli, table string, s *relay.Stats, warnings []string) {
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table\t%s\n", cell(table))
	for _, st := range statuses {
		if st == outbox.StatusPublished && s.PublishedEstimated {
			fmt.Fprintf(w, "%s\t~%d (estimate)\n", st, s.Counts[st])
			continue
		}
		fmt.Fprintf(w, "%s\t%d\n", st, s.Counts[st])
	}
	fmt.Fprintf(w, "oldest pending\t%s\n", s.OldestPendingAge.Round(time.Millisecond))
	if ws := s.WAL; ws != nil {
		state := "no relay streams it"
		if ws.Active {
			state = "streamed by " + ws.Streamer
		}
		fmt.Fprintf(w, "WAL slot\t%s (%s, %s)\n", cell(ws.Slot), cell(ws.Status), cell(state))
		fmt.Fprintf(w, "WAL lag\t%d bytes, oldest unconfirmed commit %s\n", ws.LagBytes, ws.OldestUnconfirmedAge.Round(time.Millisecond))
		if ws.SafeBytes >= 0 {
			fmt.Fprintf(w, "WAL before invalidation\t%d bytes (max_slot_wal_keep_size)\n", ws.SafeBytes)
		}
	}
	_ = w.Flush()
	fmt.Fprintf(c.stdout, "\nrelays: %d\n", len(s.Relays))
	if len(s.Relays) > 0 {
		w = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tHOST\tSTATE\tLAST BEAT\tSTARTED\tPUBLISHED\tFAILED\tDEAD\tLOST\tRESCUED\tPUBLISHER")
		for _, r := range s.Relays {
			state := "live"
			if !r.Live {
				state = "stale"
			}
			if r.Role != "" {
				state += " (" + r.Role + ")"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", cell(r.ID), cell(r.Host), cell(state), r.Age.Round(time.Second),
				r.StartedAt.UTC().Format(time.RFC3339), r.Published, r.Failed, r.Dead, r.Lost, r.Rescued, cell(r.Publisher))
		}
		_ = w.Flush()
		fmt.Fprintln(c.stdout, "(a relay's counts are as of its last heartbeat: they lag by up to one heartbeat interval)")
	}
	for _, warning := range warnings {
		fmt.Fprintf(c.stdout, "\nWARNING: %s\n", line(warning))
	}
}

func writeJSON(c *cli, v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
