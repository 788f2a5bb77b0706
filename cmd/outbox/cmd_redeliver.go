package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gormoutbox/outbox"
)

// redeliverJSON is the stable JSON of "outbox redeliver".
type redeliverJSON struct {
	// Redelivered counts the events returned to pending (0 without --yes).
	Redelivered int64 `json:"redelivered"`
	// Redeliverable counts the given events that are published or dead.
	Redeliverable int `json:"redeliverable"`
	// LeftAlone counts the other given events by status, and "not_found".
	LeftAlone map[string]int `json:"left_alone"`
}

func runRedeliver(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "redeliver", "redeliver --id EVENT_ID [--id EVENT_ID ...] --yes",
		"Returns published or dead events to pending, with attempts, last error, lease and\n"+
			"publication time cleared, so that a relay delivers them again (a consumer lost\n"+
			"them). Events in other states are never changed: pending and failed ones will be\n"+
			"delivered anyway, and a publishing one is in a relay's hands. Without --yes\n"+
			"nothing changes: it says how many events would be redelivered and what state\n"+
			"the others are in.").withJSON()
	var ids stringList
	f.fs.Var(&ids, "id", "redeliver the event with this event `id` (repeatable)")
	yes := f.fs.Bool("yes", false, "really redeliver")
	if err := f.parse(args); err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("say which events: --id EVENT_ID (repeatable)")
	}
	if err := checkArgs("--id", outbox.MaxIDLen, ids...); err != nil {
		return err
	}
	insp, err := f.inspect(ctx)
	if err != nil {
		return err
	}
	st, err := insp.EventStatuses(ctx, ids...)
	if err != nil {
		return err
	}
	out := redeliverJSON{LeftAlone: map[string]int{}}
	for _, id := range unique(ids) {
		switch s, ok := st[id]; {
		case !ok:
			out.LeftAlone["not_found"]++
		case s == outbox.StatusPublished || s == outbox.StatusDead:
			out.Redeliverable++
		default:
			out.LeftAlone[string(s)]++
		}
	}
	if !*yes {
		if f.json {
			if err := writeJSON(c, out); err != nil {
				return err
			}
		}
		return fmt.Errorf("refusing to redeliver without --yes: %d event(s) are published or dead and would be redelivered%s; nothing was changed",
			out.Redeliverable, leftAlone(out.LeftAlone))
	}
	if out.Redelivered, err = insp.Redeliver(ctx, unique(ids)...); err != nil {
		return err
	}
	if f.json {
		return writeJSON(c, out)
	}
	fmt.Fprintf(c.stdout, "redelivered %d event(s)%s\n", out.Redelivered, leftAlone(out.LeftAlone))
	return nil
}

// leftAlone describes the events a redelivery does not change.
func leftAlone(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], strings.ReplaceAll(k, "_", " "))
	}
	return "; left alone: " + strings.Join(parts, ", ")
}

func unique(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
