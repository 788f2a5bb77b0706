package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

func runDead(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(c.stdout, "Usage: outbox dead <list|replay> [flags]\n\n"+
			"  list    list dead events, oldest first, a page at a time\n"+
			"  replay  return dead events to pending (requires --yes)\n\n"+
			"Run 'outbox dead list --help' or 'outbox dead replay --help' for their flags.")
		if len(args) == 0 {
			return usagef("dead needs a subcommand: list or replay")
		}
		return nil
	}
	var err error
	switch args[0] {
	case "list":
		err = runDeadList(ctx, c, args[1:])
	case "replay":
		err = runDeadReplay(ctx, c, args[1:])
	default:
		return usagef("unknown subcommand %q: want list or replay", args[0])
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		var ue *usageError
		if errors.As(err, &ue) {
			return usagef("%s: %v", args[0], ue.msg)
		}
		return fmt.Errorf("%s: %w", args[0], err)
	}
	return err
}

// filterFlags adds --type and --older-than.
func filterFlags(f *common) (typ *string, olderThan *time.Duration) {
	typ = f.fs.String("type", "", "only events of this `type`")
	olderThan = f.fs.Duration("older-than", 0, "only events created more than this `duration` ago (e.g. 1h)")
	return typ, olderThan
}

// deadJSON is the stable JSON of one dead event.
type deadJSON struct {
	ID            int64     `json:"id"`
	EventID       string    `json:"event_id"`
	Type          string    `json:"type"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	PartitionKey  string    `json:"partition_key"`
	Topic         string    `json:"topic"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	CreatedAt     time.Time `json:"created_at"`
}

type deadListJSON struct {
	Events []deadJSON `json:"events"`
	// NextAfter is the --after value of the next page, 0 when this is the last.
	NextAfter int64 `json:"next_after"`
}

func runDeadList(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "dead list", "dead list [flags]",
		"Lists dead events, oldest first. Pages: pass the printed next --after value to get the next page.\n"+
			"The text output cuts each last error to one short line: --wide prints it whole\n"+
			"(newlines as \\n), and so do --json and 'outbox show EVENT_ID'.").withJSON()
	typ, olderThan := filterFlags(f)
	wide := f.fs.Bool("wide", false, "print each last error whole")
	after := f.fs.Int64("after", 0, "list events whose row `id` is greater (the paging cursor)")
	limit := f.fs.Int("limit", 50, "events per page (1 to 1000)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("--limit must be between 1 and 1000")
	}
	if err := checkArgs("--type", outbox.MaxTypeLen, *typ); err != nil {
		return err
	}
	insp, err := f.inspect(ctx)
	if err != nil {
		return err
	}
	rows, err := insp.ListDead(ctx, relay.Filter{Type: *typ, OlderThan: *olderThan, AfterID: *after, Limit: *limit})
	if err != nil {
		return err
	}
	out := deadListJSON{Events: []deadJSON{}}
	for _, r := range rows {
		out.Events = append(out.Events, deadJSON{ID: r.ID, EventID: r.EventID, Type: r.Type, AggregateType: r.AggregateType,
			AggregateID: r.AggregateID, PartitionKey: r.PartitionKey, Topic: r.Topic, Attempts: r.Attempts,
			LastError: deref(r.LastError), CreatedAt: r.CreatedAt.UTC()})
	}
	if len(rows) == *limit {
		out.NextAfter = rows[len(rows)-1].ID
	}
	if f.json {
		return writeJSON(c, out)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tEVENT ID\tTYPE\tATTEMPTS\tCREATED\tLAST ERROR")
	cut := false
	for _, e := range out.Events {
		msg := cell(e.LastError)
		if !*wide {
			msg = cell(oneLine(e.LastError, 100))
			cut = cut || utf8.RuneCountInString(e.LastError) > 100
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\n", e.ID, cell(e.EventID), cell(e.Type), e.Attempts, e.CreatedAt.Format(time.RFC3339), msg)
	}
	_ = w.Flush()
	if cut {
		fmt.Fprintln(c.stdout, "\nerrors were shortened: --wide prints them whole, 'outbox show EVENT_ID' prints one event")
	}
	if out.NextAfter > 0 {
		fmt.Fprintf(c.stdout, "\nmore: outbox dead list --after %d\n", out.NextAfter)
	}
	return nil
}

type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runDeadReplay(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "dead replay", "dead replay (--id EVENT_ID ... | --all [--type T] [--older-than D]) --yes",
		"Returns dead events to pending, with attempts, last error and lease cleared, so\n"+
			"that a relay delivers them again. Only dead events are replayed. Without --yes\n"+
			"nothing changes: it says how many events would be replayed.").withJSON()
	var ids stringList
	f.fs.Var(&ids, "id", "replay the dead event with this event `id` (repeatable)")
	all := f.fs.Bool("all", false, "replay every dead event matching --type and --older-than")
	typ, olderThan := filterFlags(f)
	batch := f.fs.Int("batch", 500, "events replayed per statement with --all (1 to 1000)")
	yes := f.fs.Bool("yes", false, "really replay")
	if err := f.parse(args); err != nil {
		return err
	}
	switch {
	case len(ids) == 0 && !*all:
		return usagef("say which events: --id EVENT_ID (repeatable) or --all")
	case len(ids) > 0 && *all:
		return usagef("--id and --all exclude each other")
	case len(ids) > 0 && (*typ != "" || *olderThan != 0):
		return usagef("--type and --older-than narrow --all, not --id")
	case *batch < 1 || *batch > 1000:
		return usagef("--batch must be between 1 and 1000")
	}
	if err := checkArgs("--id", outbox.MaxIDLen, ids...); err != nil {
		return err
	}
	if err := checkArgs("--type", outbox.MaxTypeLen, *typ); err != nil {
		return err
	}
	insp, err := f.inspect(ctx)
	if err != nil {
		return err
	}
	filter := relay.Filter{Type: *typ, OlderThan: *olderThan, Limit: *batch}
	if !*yes {
		n, err := countDead(ctx, insp, ids, filter)
		if err != nil {
			return err
		}
		return fmt.Errorf("refusing to replay without --yes: %d dead event(s) match; nothing was changed", n)
	}
	var n int64
	distinct := unique(ids)
	if *all {
		n, err = insp.ReplayAll(ctx, filter)
	} else {
		n, err = insp.Replay(ctx, distinct...)
	}
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(c, map[string]int64{"replayed": n})
	}
	fmt.Fprintf(c.stdout, "replayed %d dead event(s)\n", n)
	if len(distinct) > 0 && n < int64(len(distinct)) {
		fmt.Fprintf(c.stdout, "%d of the %d distinct ids were not dead (or do not exist) and were left alone\n", int64(len(distinct))-n, len(distinct))
	}
	return nil
}

// countDead counts what a replay would replay.
func countDead(ctx context.Context, insp *relay.Inspector, ids []string, f relay.Filter) (int64, error) {
	var n int64
	if len(ids) > 0 {
		st, err := insp.EventStatuses(ctx, ids...)
		for _, s := range st {
			if s == outbox.StatusDead {
				n++
			}
		}
		return n, err
	}
	f.Limit = 1000
	for {
		page, err := insp.ListDead(ctx, f)
		if err != nil {
			return n, err
		}
		n += int64(len(page))
		if len(page) < f.Limit {
			return n, nil
		}
		f.AfterID = page[len(page)-1].ID
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// oneLine returns s on one line (newlines and tabs as spaces), cut to
// max characters.
func oneLine(s string, max int) string {
	out := []rune{}
	for _, r := range s {
		if r == '\n' || r == '\t' {
			r = ' '
		}
		out = append(out, r)
		if len(out) == max {
			return string(out) + "…"
		}
	}
	return string(out)
}
