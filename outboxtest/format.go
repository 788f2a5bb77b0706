package outboxtest

import (
	"fmt"
	"strings"
)

// maxListed bounds the events a failure message lists.
const maxListed = 20

// listRows lists rows for a failure message, newest maxListed of them,
// each with why it does not match when why is given, under a heading
// such as "3 matching events in outbox_events, oldest first".
func listRows(rows []*row, why func(*row) []string, adjective, where string) string {
	if len(rows) == 0 {
		return "  no " + adjective + "events" + where
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "  %d %s%s%s, oldest first:\n", len(rows), adjective, plural(len(rows), "event", "events"), where)
	if len(rows) > maxListed {
		fmt.Fprintf(&sb, "    … %d older not shown\n", len(rows)-maxListed)
		rows = rows[len(rows)-maxListed:]
	}
	for _, r := range rows {
		fmt.Fprintf(&sb, "    %s\n", describe(r))
		if why != nil {
			if w := why(r); len(w) > 0 {
				fmt.Fprintf(&sb, "      differs: %s\n", strings.Join(w, "; "))
			}
		}
	}
	return strings.TrimRight(sb.String(), "\n")
}

// describe summarises one event in a line: its type and id, then what
// identifies and routes it, its state and a cut of its payload.
func describe(r *row) string {
	var parts []string
	switch {
	case r.AggregateType != "" && r.AggregateID != "":
		parts = append(parts, "aggregate "+r.AggregateType+"/"+r.AggregateID)
	case r.AggregateType != "":
		parts = append(parts, "aggregate_type "+r.AggregateType)
	case r.AggregateID != "":
		parts = append(parts, "aggregate_id "+r.AggregateID)
	}
	for _, f := range [...]struct{ name, v string }{
		{"key", r.PartitionKey}, {"topic", r.Topic}, {"tenant", r.TenantID},
	} {
		if f.v != "" {
			parts = append(parts, f.name+" "+truncate(f.v, maxShown))
		}
	}
	if r.Version != 1 {
		parts = append(parts, fmt.Sprintf("version %d", r.Version))
	}
	state := string(r.Status)
	if r.Attempts > 0 {
		state += fmt.Sprintf(" after %d %s", r.Attempts, plural(r.Attempts, "attempt", "attempts"))
	}
	parts = append(parts, state, "payload "+payloadSummary(r.Payload))
	return fmt.Sprintf("%s %s: %s", truncate(r.Type, maxShown), r.EventID, strings.Join(parts, ", "))
}
