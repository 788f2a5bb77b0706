package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	Relays                  []relayJSON      `json:"relays"`
}

type relayJSON struct {
	ID             string    `json:"id"`
	Host           string    `json:"host"`
	PID            int       `json:"pid"`
	Live           bool      `json:"live"`
	StartedAt      time.Time `json:"started_at"`
	LastBeat       time.Time `json:"last_beat"`
	LastBeatAgeSec float64   `json:"last_beat_age_seconds"`
	Claimed        int64     `json:"claimed"`
	Published      int64     `json:"published"`
	Failed         int64     `json:"failed"`
	Dead           int64     `json:"dead"`
	Lost           int64     `json:"lost"`
}

var statuses = []outbox.Status{outbox.StatusPending, outbox.StatusPublishing, outbox.StatusPublished, outbox.StatusFailed, outbox.StatusDead}

func runStats(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "stats", "stats [flags]",
		"Counts the events per status, measures how long the oldest deliverable pending\n"+
			"event has waited, and lists the relays that recorded heartbeats, live or stale.").withJSON()
	if err := f.parse(args); err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	s, err := relay.GetStats(ctx, db)
	if err != nil {
		return err
	}
	out := statsJSON{Table: f.table, Counts: map[string]int64{}, OldestPendingAgeSeconds: s.OldestPendingAge.Seconds(), Relays: []relayJSON{}}
	for _, st := range statuses {
		out.Counts[string(st)] = s.Counts[st]
	}
	for _, r := range s.Relays {
		out.Relays = append(out.Relays, relayJSON{ID: r.ID, Host: r.Host, PID: r.PID, Live: r.Live, StartedAt: r.StartedAt.UTC(),
			LastBeat: r.LastBeat.UTC(), LastBeatAgeSec: r.Age.Seconds(), Claimed: r.Claimed, Published: r.Published,
			Failed: r.Failed, Dead: r.Dead, Lost: r.Lost})
	}
	if f.json {
		return writeJSON(c, out)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table\t%s\n", f.table)
	for _, st := range statuses {
		fmt.Fprintf(w, "%s\t%d\n", st, s.Counts[st])
	}
	fmt.Fprintf(w, "oldest pending\t%s\n", s.OldestPendingAge.Round(time.Millisecond))
	_ = w.Flush()
	fmt.Fprintf(c.stdout, "\nrelays: %d\n", len(s.Relays))
	if len(s.Relays) > 0 {
		w = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tHOST\tSTATE\tLAST BEAT\tSTARTED\tPUBLISHED\tFAILED\tDEAD\tLOST")
		for _, r := range s.Relays {
			state := "live"
			if !r.Live {
				state = "stale"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\t%s\t%d\t%d\t%d\t%d\n", r.ID, r.Host, state, r.Age.Round(time.Second),
				r.StartedAt.UTC().Format(time.RFC3339), r.Published, r.Failed, r.Dead, r.Lost)
		}
		_ = w.Flush()
	}
	return nil
}

func writeJSON(c *cli, v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
