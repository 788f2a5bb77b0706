package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
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
	// DeadLetters are the consumers' dead letters of --dead-letters.
	DeadLetters []deadLetterJSON `json:"dead_letters,omitempty"`
}

func runDeadList(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "dead list", "dead list [flags]",
		"Lists dead events, oldest first. Pages: pass the printed next --after value to get the next page.\n"+
			"The text output cuts each last error to one short line: --wide prints it whole\n"+
			"(newlines as \\n), and so do --json and 'outbox show EVENT_ID'.\n\n"+
			"Then, with --dead-letters, a page of each consumer's dead letter (the messages a\n"+
			"consumer gave up on, whose events the outbox says published): --limit messages,\n"+
			"the next page with the printed --dead-letters-after NAME=CURSOR. A dead letter\n"+
			"that cannot be read is an error (exit status 1) after the others are listed.\n\n"+deadLettersHelp).withJSON()
	typ, olderThan := filterFlags(f)
	wide := f.fs.Bool("wide", false, "print each last error (and reason) whole")
	after := f.fs.Int64("after", 0, "list events whose row `id` is greater (the paging cursor)")
	limit := f.fs.Int("limit", 50, "events (and messages of each dead letter) per page (1 to 1000)")
	dlValues := f.withDeadLetters()
	var dlAfter stringList
	f.fs.Var(&dlAfter, "dead-letters-after", "list the dead letter's messages after this cursor, `NAME=CURSOR` as printed (repeatable)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("--limit must be between 1 and 1000")
	}
	if err := checkArgs("--type", outbox.MaxTypeLen, *typ); err != nil {
		return err
	}
	sources, err := f.deadLetters(*dlValues)
	if err != nil {
		return err
	}
	cursors, err := deadLetterCursors(dlAfter, sources)
	if err != nil {
		return err
	}
	out, err := listDead(ctx, f, relay.Filter{Type: *typ, OlderThan: *olderThan, AfterID: *after, Limit: *limit})
	if err != nil {
		return err
	}
	var errs []string
	out.DeadLetters, errs = readDeadLetters(ctx, sources, cursors, *limit, f.timeout)
	if f.json {
		err = writeJSON(c, out)
	} else {
		printDead(c, out, *wide)
		printDeadLetters(c, out.DeadLetters, *wide)
	}
	if err == nil && len(errs) > 0 {
		err = fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return err
}

// listDead reads a page of the outbox's dead events.
func listDead(ctx context.Context, f *common, filter relay.Filter) (deadListJSON, error) {
	out := deadListJSON{Events: []deadJSON{}}
	insp, err := f.inspect(ctx)
	if err != nil {
		return out, err
	}
	rows, err := insp.ListDead(ctx, filter)
	if err != nil {
		return out, err
	}
	for _, r := range rows {
		out.Events = append(out.Events, deadJSON{ID: r.ID, EventID: r.EventID, Type: r.Type, AggregateType: r.AggregateType,
			AggregateID: r.AggregateID, PartitionKey: r.PartitionKey, Topic: r.Topic, Attempts: r.Attempts,
			LastError: deref(r.LastError), CreatedAt: r.CreatedAt.UTC()})
	}
	if len(rows) == filter.Limit {
		out.NextAfter = rows[len(rows)-1].ID
	}
	return out, nil
}

// printDead prints the outbox's dead events as text.
func printDead(c *cli, out deadListJSON, wide bool) {
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tEVENT ID\tTYPE\tATTEMPTS\tCREATED\tLAST ERROR")
	cut := false
	for _, e := range out.Events {
		msg := cell(e.LastError)
		if !wide {
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
}

type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runDeadReplay(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "dead replay", "dead replay (--id EVENT_ID ... | --all [--type T] [--older-than D] | --message ID ... [--from NAME]) --yes",
		"Returns dead events to pending, with attempts, last error and lease cleared, so\n"+
			"that a relay delivers them again. Only dead events are replayed. Without --yes\n"+
			"nothing changes: it says how many events would be replayed.\n\n"+
			"With --message, hands messages of a consumer's dead letter (--dead-letters) back\n"+
			"to its consumers instead, as its adapter does (outbox dead list prints their ids);\n"+
			"a message no longer there is left alone. No database is needed then.\n\n"+deadLettersHelp).withJSON()
	f.dbOptional = true
	var ids, messages stringList
	f.fs.Var(&ids, "id", "replay the dead event with this event `id` (repeatable)")
	all := f.fs.Bool("all", false, "replay every dead event matching --type and --older-than")
	typ, olderThan := filterFlags(f)
	batch := f.fs.Int("batch", 500, "events replayed per statement with --all (1 to 1000)")
	dlValues := f.withDeadLetters()
	f.fs.Var(&messages, "message", "replay the consumer's dead message with this `id` (repeatable), from --dead-letters")
	from := f.fs.String("from", "", "the dead letter of --message, by `NAME`, when several are given")
	yes := f.fs.Bool("yes", false, "really replay")
	if err := f.parse(args); err != nil {
		return err
	}
	if len(messages) > 0 {
		if len(ids) > 0 || *all || *typ != "" || *olderThan != 0 {
			return usagef("--message replays a consumer's dead messages, --id and --all the outbox's dead events: one or the other")
		}
		return replayMessages(ctx, c, f, *dlValues, *from, messages, *yes)
	}
	switch {
	case *from != "" || len(*dlValues) > 0:
		return usagef("--dead-letters and --from name the dead letter of --message")
	case f.db == "":
		return errNoDB
	case len(ids) == 0 && !*all:
		return usagef("say which events: --id EVENT_ID (repeatable) or --all (or a consumer's messages: --message ID)")
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
	return replayOutbox(ctx, c, f, ids, *all, relay.Filter{Type: *typ, OlderThan: *olderThan, Limit: *batch}, *yes)
}

// replayOutbox replays the outbox's dead events of ids, or all those
// filter matches.
func replayOutbox(ctx context.Context, c *cli, f *common, ids []string, all bool, filter relay.Filter, yes bool) error {
	insp, err := f.inspect(ctx)
	if err != nil {
		return err
	}
	if !yes {
		n, err := countDead(ctx, insp, ids, filter)
		if err != nil {
			return err
		}
		return fmt.Errorf("refusing to replay without --yes: %d dead event(s) match; nothing was changed", n)
	}
	var n int64
	distinct := unique(ids)
	if all {
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
