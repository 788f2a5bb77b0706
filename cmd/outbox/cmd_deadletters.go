package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gormoutbox/outbox/consume"
)

// The consumers' dead letters in dead list, dead replay and admin.

// withDeadLetters adds --dead-letters to the command.
func (f *common) withDeadLetters() *stringList {
	var v stringList
	f.fs.Var(&v, "dead-letters", "a consumer's dead letter, [NAME=]`URL` (repeatable; default $"+deadLettersEnv+"): see 'outbox help'")
	return &v
}

// deadLetters parses the --dead-letters values (or the environment's) into
// dead letters that connect when first read, closed when the command
// returns.
func (f *common) deadLetters(values []string) ([]*deadLetters, error) {
	urls, err := parseDeadLetters(f.c, deadLetterValues(f.c, values))
	if err != nil {
		return nil, err
	}
	return openDeadLetters(f.c, urls, f.timeout), nil
}

// deadLetterJSON is the stable JSON of a page of a consumer's dead letter.
type deadLetterJSON struct {
	Name       string            `json:"name"`
	Replayable bool              `json:"replayable"`
	Messages   []deadMessageJSON `json:"messages"`
	// NextCursor is the cursor of the next page (--dead-letters-after
	// NAME=CURSOR), "" when this is the last.
	NextCursor string `json:"next_cursor"`
	// Error says why the dead letter could not be read.
	Error string `json:"error,omitempty"`
}

// deadMessageJSON is the stable JSON of a consumer's dead message.
type deadMessageJSON struct {
	ID         string     `json:"id"`
	EventID    string     `json:"event_id"`
	Type       string     `json:"type"`
	Source     string     `json:"source"`
	Deliveries int        `json:"deliveries"`
	DeadAt     *time.Time `json:"dead_at"`
	Reason     string     `json:"reason"`
}

// deadLetterCursors reads the --dead-letters-after values: NAME=CURSOR,
// or CURSOR alone when there is one dead letter.
func deadLetterCursors(values []string, sources []*deadLetters) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		name, cursor := "", v
		if i := strings.LastIndexByte(v, '='); i >= 0 { // no reader's cursor holds '='
			name, cursor = v[:i], v[i+1:]
		} else if len(sources) == 1 {
			name = sources[0].name
		} else {
			return nil, usagef("--dead-letters-after %s: say which dead letter, NAME=CURSOR", cell(v))
		}
		if err := checkDeadLetterText(cursor, maxDeadLetterArg); err != nil {
			return nil, usagef("--dead-letters-after: the cursor %v", err)
		}
		if _, dup := out[name]; dup || !hasDeadLetter(sources, name) {
			return nil, usagef("--dead-letters-after %s: no dead letter named %s among --dead-letters (or given twice)", cell(v), cell(name))
		}
		out[name] = cursor
	}
	return out, nil
}

func hasDeadLetter(sources []*deadLetters, name string) bool {
	for _, s := range sources {
		if s.name == name {
			return true
		}
	}
	return false
}

// readDeadLetters reads a page of each dead letter, each within timeout,
// and returns the pages and the errors, one line each.
func readDeadLetters(ctx context.Context, sources []*deadLetters, cursors map[string]string, limit int, timeout time.Duration) ([]deadLetterJSON, []string) {
	out := make([]deadLetterJSON, len(sources))
	var errs []string
	for i, s := range sources {
		out[i] = deadLetterJSON{Name: s.name, Replayable: true, Messages: []deadMessageJSON{}}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		page, next, err := s.DeadLetters(sctx, cursors[s.name], limit)
		cancel()
		if err != nil {
			out[i].Error = err.Error()
			errs = append(errs, fmt.Sprintf("dead letters %s: %v", s.name, err))
			continue
		}
		out[i].NextCursor = next
		for _, m := range page {
			out[i].Messages = append(out[i].Messages, deadMessageOf(m))
		}
	}
	return out, errs
}

func deadMessageOf(m consume.DeadMessage) deadMessageJSON {
	j := deadMessageJSON{ID: m.ID, Source: m.Source, Deliveries: m.Deliveries, Reason: m.Reason}
	if m.Envelope != nil {
		j.EventID, j.Type = m.Envelope.ID, m.Envelope.Type
	}
	if !m.DeadAt.IsZero() {
		at := m.DeadAt.UTC()
		j.DeadAt = &at
	}
	return j
}

// printDeadLetters prints the pages as text after the outbox's dead
// events.
func printDeadLetters(c *cli, pages []deadLetterJSON, wide bool) {
	cut := false
	for _, p := range pages {
		fmt.Fprintf(c.stdout, "\ndead letters of %s:\n", cell(p.Name))
		switch {
		case p.Error != "":
			fmt.Fprintln(c.stdout, "  not read: the error is on stderr")
			continue
		case len(p.Messages) == 0:
			fmt.Fprintln(c.stdout, "  none")
			continue
		}
		w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tEVENT ID\tTYPE\tSOURCE\tDELIVERIES\tDEAD AT\tREASON")
		for _, m := range p.Messages {
			reason := cell(m.Reason)
			if !wide {
				reason = cell(oneLine(m.Reason, 100))
				cut = cut || utf8.RuneCountInString(m.Reason) > 100
			}
			at, n := "-", "-" // not known
			if m.DeadAt != nil {
				at = m.DeadAt.Format(time.RFC3339)
			}
			if m.Deliveries > 0 {
				n = strconv.Itoa(m.Deliveries)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(m.ID), cell(m.EventID), cell(m.Type), cell(m.Source), n, at, reason)
		}
		_ = w.Flush()
		if p.NextCursor != "" {
			fmt.Fprintf(c.stdout, "more: outbox dead list --dead-letters-after %s\n", cell(shellQuote(p.Name+"="+p.NextCursor)))
		}
	}
	if cut {
		fmt.Fprintln(c.stdout, "\nreasons were shortened: --wide prints them whole")
	}
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	plain := func(r rune) bool {
		return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.:/=@%+,", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !plain(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pickDeadLetter returns the dead letter --from names, or the only one.
func pickDeadLetter(sources []*deadLetters, from string) (*deadLetters, error) {
	switch {
	case len(sources) == 0:
		return nil, usagef("--message needs the dead letter it is in: --dead-letters [NAME=]URL (or %s)", deadLettersEnv)
	case from == "" && len(sources) > 1:
		return nil, usagef("%d dead letters given: say which holds the messages with --from NAME", len(sources))
	case from == "":
		return sources[0], nil
	}
	for _, s := range sources {
		if s.name == from {
			return s, nil
		}
	}
	return nil, usagef("--from %s: no dead letter of that name among --dead-letters", cell(from))
}

// replayMessages replays the consumer's dead messages of ids (dead replay
// --message) from the dead letter of values (or the environment's) that
// from names.
func replayMessages(ctx context.Context, c *cli, f *common, values []string, from string, ids []string, yes bool) error {
	for _, m := range ids {
		if err := checkDeadLetterText(m, maxDeadLetterArg); err != nil {
			return usagef("--message %v", err)
		}
	}
	sources, err := f.deadLetters(values)
	if err != nil {
		return err
	}
	s, err := pickDeadLetter(sources, from)
	if err != nil {
		return err
	}
	return replayDeadMessages(ctx, c, f, s, ids, yes)
}

// replayDeadMessages replays the messages of ids from the dead letter, or
// without yes says how many of them are in it.
func replayDeadMessages(ctx context.Context, c *cli, f *common, s *deadLetters, ids []string, yes bool) error {
	distinct := unique(ids)
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if !yes {
		found, complete, err := countDeadMessages(ctx, s, distinct)
		if err != nil {
			return fmt.Errorf("dead letters %s: %w", s.name, err)
		}
		bound := ""
		if !complete {
			bound = fmt.Sprintf(" among its first %d messages", maxCountedMessages)
		}
		return fmt.Errorf("refusing to replay without --yes: %d of the %d distinct message id(s) are in the dead letter %s%s; nothing was changed",
			found, len(distinct), s.name, bound)
	}
	n, err := s.ReplayDead(ctx, distinct...)
	if err != nil {
		return fmt.Errorf("dead letters %s: replayed %d of the %d distinct message id(s), then: %w", s.name, n, len(distinct), err)
	}
	if f.json {
		return writeJSON(c, map[string]any{"dead_letters": s.name, "replayed": n, "distinct_ids": len(distinct)})
	}
	fmt.Fprintf(c.stdout, "replayed %d of the %d distinct message id(s) of the dead letter %s\n", n, len(distinct), cell(s.name))
	if n < len(distinct) {
		fmt.Fprintf(c.stdout, "%d of the %d distinct ids were not in it (any more) and were left alone\n", len(distinct)-n, len(distinct))
	}
	return nil
}

// maxCountedMessages bounds what a replay without --yes reads to count:
// one page (AMQP's reader takes every message before a page again).
const maxCountedMessages = 10_000

// countDeadMessages counts how many of ids are in the dead letter's first
// maxCountedMessages messages; complete says whether that was all of it.
func countDeadMessages(ctx context.Context, s *deadLetters, ids []string) (found int, complete bool, err error) {
	page, next, err := s.DeadLetters(ctx, "", maxCountedMessages)
	if err != nil {
		return 0, false, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for _, m := range page {
		if want[m.ID] {
			found++
			delete(want, m.ID)
		}
	}
	return found, next == "" || len(want) == 0, nil
}
