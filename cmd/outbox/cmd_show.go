package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
)

// eventJSON is the stable JSON of "outbox show".
type eventJSON struct {
	ID            int64             `json:"id"`
	EventID       string            `json:"event_id"`
	Type          string            `json:"type"`
	Version       int               `json:"version"`
	TenantID      string            `json:"tenant_id"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	PartitionKey  string            `json:"partition_key"`
	Topic         string            `json:"topic"`
	Status        outbox.Status     `json:"status"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"` // 0: the relay's default
	ClaimVersion  int64             `json:"claim_version"`
	LockedBy      *string           `json:"locked_by"`
	LockedUntil   *time.Time        `json:"locked_until"`
	LastError     *string           `json:"last_error"`
	CreatedAt     time.Time         `json:"created_at"`
	AvailableAt   time.Time         `json:"available_at"`
	PublishedAt   *time.Time        `json:"published_at"`
	Headers       map[string]string `json:"headers"`
	// Payload is the payload itself when it is JSON, else a string: the
	// text, or base64 of bytes that are not UTF-8 (PayloadEncoding says).
	Payload         any    `json:"payload"`
	PayloadEncoding string `json:"payload_encoding"` // json, text or base64
	// AttemptLog is the event's attempt log (relay.WithAttemptLog), oldest
	// first; null when the attempt log table does not exist.
	AttemptLog []attemptJSON `json:"attempt_log"`
}

// attemptJSON is one record of the attempt log in "outbox show --json".
type attemptJSON struct {
	ClaimVersion int64  `json:"claim_version"`
	Attempt      int    `json:"attempt"`
	Outcome      string `json:"outcome"`
	RelayID      string `json:"relay_id"`
	DurationUs   int64  `json:"duration_us"`
	Error        string `json:"error,omitempty"`
	// Receipt is where the publisher says a published event went
	// (relay.SetReceipt, such as a Kafka "topic/partition@offset");
	// omitted when the record has none.
	Receipt   string    `json:"receipt,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

func runShow(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "show", "show EVENT_ID [flags]",
		"Prints one event: its status, attempts, last error (whole), lease owner, claim\n"+
			"version, timestamps, its attempt log (relays run with relay.WithAttemptLog) with\n"+
			"each published record's receipt (where the publisher put the event, such as a\n"+
			"Kafka topic/partition@offset), headers and payload (pretty-printed when it is JSON).").withJSON().withArgs(1, 1, "EVENT_ID")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := checkArgs("EVENT_ID", outbox.MaxIDLen, f.args[0]); err != nil {
		return err
	}
	insp, err := f.inspect(ctx)
	if err != nil {
		return err
	}
	e, err := insp.GetEvent(ctx, f.args[0])
	if err != nil {
		return err
	}
	out := toEventJSON(e)
	switch atts, err := insp.Attempts(ctx, e.EventID); {
	case errors.Is(err, outbox.ErrNotMigrated): // no attempt log table: null
	case err != nil:
		return err
	default:
		out.AttemptLog = make([]attemptJSON, len(atts))
		for i, a := range atts {
			out.AttemptLog[i] = attemptJSON{ClaimVersion: a.ClaimVersion, Attempt: a.Attempt, Outcome: a.Outcome, RelayID: a.RelayID,
				DurationUs: a.Duration.Microseconds(), Error: a.Error, Receipt: a.Receipt, CreatedAt: a.CreatedAt.UTC()}
		}
	}
	if f.json {
		return writeJSON(c, out)
	}
	printEvent(c.stdout, out)
	return nil
}

func toEventJSON(e *outbox.OutboxEvent) eventJSON {
	out := eventJSON{ID: e.ID, EventID: e.EventID, Type: e.Type, Version: e.Version, TenantID: e.TenantID,
		AggregateType: e.AggregateType, AggregateID: e.AggregateID, PartitionKey: e.PartitionKey, Topic: e.Topic,
		Status: e.Status, Attempts: e.Attempts, MaxAttempts: e.MaxAttempts, ClaimVersion: e.ClaimVersion,
		LockedBy: e.LockedBy, LockedUntil: utc(e.LockedUntil), LastError: e.LastError, CreatedAt: e.CreatedAt.UTC(),
		AvailableAt: e.AvailableAt.UTC(), PublishedAt: utc(e.PublishedAt), Headers: map[string]string{}}
	if len(e.Headers) > 0 && json.Unmarshal(e.Headers, &out.Headers) != nil {
		out.Headers = map[string]string{"(undecodable headers)": string(e.Headers)}
	}
	switch {
	case len(e.Payload) > 0 && utf8.Valid(e.Payload) && json.Valid(e.Payload): // json.Valid takes bytes that are not UTF-8 in strings
		out.Payload, out.PayloadEncoding = json.RawMessage(e.Payload), "json"
	case utf8.Valid(e.Payload):
		out.Payload, out.PayloadEncoding = string(e.Payload), "text"
	default:
		out.Payload, out.PayloadEncoding = base64.StdEncoding.EncodeToString(e.Payload), "base64"
	}
	return out
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func printEvent(w io.Writer, e eventJSON) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, cell(v)) }
	row("event id", e.EventID)
	row("row id", fmt.Sprint(e.ID))
	row("type", fmt.Sprintf("%s (version %d)", e.Type, e.Version))
	row("status", string(e.Status))
	maxAttempts := fmt.Sprint(e.MaxAttempts)
	if e.MaxAttempts == 0 {
		maxAttempts = "the relay's default"
	}
	row("attempts", fmt.Sprintf("%d (max: %s)", e.Attempts, maxAttempts))
	row("aggregate", strings.TrimSpace(e.AggregateType+" "+e.AggregateID))
	row("partition key", e.PartitionKey)
	row("topic", e.Topic)
	row("tenant", e.TenantID)
	row("created at", stamp(&e.CreatedAt))
	row("available at", stamp(&e.AvailableAt))
	row("published at", stamp(e.PublishedAt))
	lease := "none"
	if e.LockedBy != nil {
		lease = "held by " + *e.LockedBy + " until " + stamp(e.LockedUntil)
	}
	row("lease", lease)
	row("claim version", fmt.Sprint(e.ClaimVersion))
	_ = tw.Flush()
	if e.LastError != nil {
		fmt.Fprintf(w, "\nlast error:\n%s\n", indent(block(*e.LastError)))
	}
	printAttempts(w, e.AttemptLog)
	if len(e.Headers) > 0 {
		fmt.Fprintln(w, "\nheaders:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
			fmt.Fprintf(tw, "  %s\t%s\n", cell(k), cell(e.Headers[k]))
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\npayload (%s):\n", e.PayloadEncoding)
	if raw, ok := e.Payload.(json.RawMessage); ok {
		var buf bytes.Buffer
		_ = json.Indent(&buf, raw, "  ", "  ")
		fmt.Fprintf(w, "  %s\n", block(buf.String()))
		return
	}
	fmt.Fprintln(w, indent(block(fmt.Sprint(e.Payload))))
}

func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// printAttempts prints the attempt log, one line a record: its receipt
// ("-" for none) and its error (on one line, cut at 200 characters).
func printAttempts(w io.Writer, log []attemptJSON) {
	switch {
	case log == nil:
		fmt.Fprintln(w, "\nattempt log: no table (run outbox migrate)")
		return
	case len(log) == 0:
		fmt.Fprintln(w, "\nattempt log: none recorded (relays log attempts with relay.WithAttemptLog)")
		return
	}
	fmt.Fprintln(w, "\nattempt log:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CLAIM\tATTEMPT\tOUTCOME\tRELAY\tDURATION\tRECORDED AT\tRECEIPT\tERROR")
	for _, a := range log {
		msg := strings.Join(strings.Fields(a.Error), " ")
		if r := []rune(msg); len(r) > 200 {
			msg = string(r[:200]) + "…"
		}
		receipt := a.Receipt
		if receipt == "" {
			receipt = "-"
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ClaimVersion, a.Attempt, cell(a.Outcome), cell(a.RelayID),
			time.Duration(a.DurationUs)*time.Microsecond, stamp(&a.CreatedAt), cell(receipt), cell(msg))
	}
	_ = tw.Flush()
}
