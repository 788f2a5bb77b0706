package outboxtest

import (
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// query reads the outbox for one helper: every row, and the filter that
// selects among them. It fails the test (and returns ok false) when the
// filters are invalid or the table cannot be read.
func query(t TB, helper string, db *gorm.DB, filters ...Filter) (rows []*row, f Filter, ok bool) {
	t.Helper()
	if db == nil {
		fatal(t, "outboxtest: %s: db is nil", helper)
		return nil, Filter{}, false
	}
	if walMode(t, helper, db) {
		return nil, Filter{}, false
	}
	f, err := all(filters...)
	if err != nil {
		fatal(t, "outboxtest: %s: %v", helper, err)
		return nil, Filter{}, false
	}
	rows, err = readAll(db)
	if err != nil {
		fatal(t, "outboxtest: %s: %v", helper, err)
		return nil, Filter{}, false
	}
	return rows, f, true
}

func kept(rows []*row, f Filter) []*row {
	var out []*row
	for _, r := range rows {
		if f.keeps(r) {
			out = append(out, r)
		}
	}
	return out
}

func envelopes(rows []*row) []*outbox.Envelope {
	out := make([]*outbox.Envelope, len(rows))
	for i, r := range rows {
		out[i] = r.env
	}
	return out
}

// Emitted returns the envelopes of the events in db's outbox table that
// every filter keeps, oldest first, as handlers would receive them
// (Attempt is the number of delivery attempts made so far: 0 before the
// first). Without filters it returns every event, in every state.
//
// db may be a transaction that has not committed: it sees its own events.
// Emitted fails the test when a filter is invalid or the table cannot be
// read.
func Emitted(t TB, db *gorm.DB, filters ...Filter) []*outbox.Envelope {
	t.Helper()
	rows, f, ok := query(t, "Emitted", db, filters...)
	if !ok {
		return nil
	}
	return envelopes(kept(rows, f))
}

// RequireEmitted asserts that exactly one event in db's outbox table
// matches want (see Like: its non-zero fields) and the filters, and
// returns its envelope for further assertions. Otherwise it fails the
// test, listing the events there are and why each does not match, or the
// events that all match (more than one is ambiguous: name the one you mean
// with ID or AggregateID, add a filter such as Since, or use
// RequireEmittedMany).
//
// db may be a transaction that has not committed: it sees its own events.
func RequireEmitted(t TB, db *gorm.DB, want outbox.Event, filters ...Filter) *outbox.Envelope {
	t.Helper()
	rows, f, ok := query(t, "RequireEmitted", db, append([]Filter{Like(want)}, filters...)...)
	if !ok {
		return nil
	}
	matched := kept(rows, f)
	switch len(matched) {
	case 1:
		return matched[0].env
	case 0:
		fatal(t, "outboxtest: RequireEmitted: no event in %s matches %s\n%s",
			tableOf(db), f, listRows(rows, f.mismatches, "", " in "+tableOf(db)))
	default:
		fatal(t, "outboxtest: RequireEmitted: %d events in %s match %s; want exactly one "+
			"(name it with ID or AggregateID, narrow with a filter such as Since, or use RequireEmittedMany)\n%s",
			len(matched), tableOf(db), f, listRows(matched, nil, "matching ", ""))
	}
	return nil
}

// RequireNotEmitted asserts that no event in db's outbox table matches
// want (see Like: its non-zero fields; the zero Event matches every event)
// and the filters; otherwise it fails the test, listing the events that
// match.
//
// db may be a transaction that has not committed: it sees its own events.
func RequireNotEmitted(t TB, db *gorm.DB, want outbox.Event, filters ...Filter) {
	t.Helper()
	rows, f, ok := query(t, "RequireNotEmitted", db, append([]Filter{Like(want)}, filters...)...)
	if !ok {
		return
	}
	if matched := kept(rows, f); len(matched) > 0 {
		fatal(t, "outboxtest: RequireNotEmitted: %d %s in %s %s %s, want none\n%s",
			len(matched), plural(len(matched), "event", "events"), tableOf(db),
			plural(len(matched), "matches", "match"), f, listRows(matched, nil, "matching ", ""))
	}
}

// RequireEmittedMany asserts that the events in db's outbox table of the
// types named in want (of any type if an expected event has no Type; with
// want empty, every event), among those the filters keep, are exactly the
// expected ones in emission order: as many, and the i-th matching want[i]
// (see Like). Events of other types are ignored. It returns their
// envelopes, in that order, or fails the test, listing the expected and
// the emitted events side by side with what differs.
//
// An event type emitted twice must be expected twice. Use Since to look
// only at what a unit of work emitted after a Mark.
//
// db may be a transaction that has not committed: it sees its own events.
func RequireEmittedMany(t TB, db *gorm.DB, want []outbox.Event, filters ...Filter) []*outbox.Envelope {
	t.Helper()
	rows, f, ok := query(t, "RequireEmittedMany", db, filters...)
	if !ok {
		return nil
	}
	likes := make([]Filter, len(want))
	for i, w := range want {
		if likes[i] = Like(w); likes[i].err != nil {
			fatal(t, "outboxtest: RequireEmittedMany: want[%d]: %v", i, likes[i].err)
			return nil
		}
	}
	got := kept(rows, f)
	types, anyType := expectedTypes(want)
	if !anyType {
		got = slices.DeleteFunc(got, func(r *row) bool { return !slices.Contains(types, r.Type) })
	}
	if matchInOrder(likes, got) {
		return envelopes(got)
	}
	scope := "of every type"
	if !anyType {
		scope = fmt.Sprintf("of types %q", types)
	}
	if len(f.checks) > 0 {
		scope += " and " + f.String()
	}
	fatal(t, "outboxtest: RequireEmittedMany: the events in %s %s do not match the expectation (in order)\n%s",
		tableOf(db), scope, sideBySide(likes, got))
	return nil
}

// expectedTypes returns the distinct types of want, and whether one of
// them is empty (any type).
func expectedTypes(want []outbox.Event) (types []string, anyType bool) {
	if len(want) == 0 {
		return nil, true
	}
	for _, w := range want {
		if w.Type == "" {
			return nil, true
		}
		if !slices.Contains(types, w.Type) {
			types = append(types, w.Type)
		}
	}
	return types, false
}

func matchInOrder(likes []Filter, got []*row) bool {
	if len(likes) != len(got) {
		return false
	}
	for i, r := range got {
		if !likes[i].keeps(r) {
			return false
		}
	}
	return true
}

// sideBySide lists each expected event with the event emitted at its
// place and what differs, then the emitted events nothing expected.
func sideBySide(likes []Filter, got []*row) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "  want %d, got %d:\n", len(likes), len(got))
	n := max(len(likes), len(got))
	for i := range min(n, maxListed) {
		switch {
		case i >= len(got):
			fmt.Fprintf(&sb, "    %d. want %s\n       got nothing\n", i+1, likes[i])
		case i >= len(likes):
			fmt.Fprintf(&sb, "    %d. want nothing\n       got  %s\n", i+1, describe(got[i]))
		default:
			fmt.Fprintf(&sb, "    %d. want %s\n       got  %s\n", i+1, likes[i], describe(got[i]))
			if why := likes[i].mismatches(got[i]); len(why) > 0 {
				fmt.Fprintf(&sb, "       differs: %s\n", strings.Join(why, "; "))
			}
		}
	}
	if n > maxListed {
		fmt.Fprintf(&sb, "    … %d more not shown\n", n-maxListed)
	}
	return strings.TrimRight(sb.String(), "\n")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// walMode fails the test, naming the helper, when db's Plugin is in WAL
// mode: its events are logical decoding messages, not rows of the table
// the helpers read. It reports whether it failed.
func walMode(t TB, helper string, db *gorm.DB) bool {
	t.Helper()
	if w, ok := outbox.WALOf(db); ok && !w.Drain {
		fatal(t, "outboxtest: %s reads the outbox table, but db's Plugin is in WAL mode (outbox.WAL): its events are messages, not rows; test with the same Plugin without WAL", helper)
		return true
	}
	return false
}
