package relay

import (
	"fmt"
	"testing"

	"github.com/gormoutbox/outbox"
)

// claimModel claims as the dialects do from a backlog of keys events
// deep each: at most heads keys, ceil(limit/keys found) events of each,
// limit in all.
func claimModel(keys, deep, limit, heads int) []outbox.OutboxEvent {
	found := min(keys, heads)
	per := (limit + found - 1) / found
	var rows []outbox.OutboxEvent
	for k := range found {
		for range min(deep, per) {
			if len(rows) < limit {
				rows = append(rows, outbox.OutboxEvent{PartitionKey: fmt.Sprint("k", k)})
			}
		}
	}
	return rows
}

// The depth follows the backlog: a claim over keys 8 deep learns to walk
// an eighth of the keys and take whole runs, with full batches; one over
// keys 1 deep keeps walking a key per event; a few deep keys are still
// walked together, at least as many as the relay delivers at once.
func TestRunDepthLearnsTheBacklog(t *testing.T) {
	const limit, minHeads = 1000, 10
	for _, tc := range []struct {
		keys, deep int
		wantHeads  func(heads int) bool
		want       string
	}{
		{1000, 8, func(h int) bool { return h <= limit/8+1 }, "about limit/8"},
		{100000, 1, func(h int) bool { return h >= limit/2 }, "at least limit/2"},
		{8, 100000, func(h int) bool { return h >= minHeads }, "at least minHeads"},
	} {
		t.Run(fmt.Sprintf("%d keys %d deep", tc.keys, tc.deep), func(t *testing.T) {
			var d runDepth
			var full, last int
			for i := range 40 {
				heads := d.heads(limit, minHeads)
				rows := claimModel(tc.keys, tc.deep, limit, heads)
				keys := d.observe(rows, limit)
				if i >= 20 {
					if !tc.wantHeads(heads) {
						t.Errorf("claim %d walked %d keys, want %s", i, heads, tc.want)
					}
					c := claimed{rows: rows, limit: limit, heads: heads, keys: keys}
					if c.full() {
						full++
					}
					last = len(rows)
				}
			}
			if full < 20 {
				t.Errorf("%d of the last 20 claims full, want all (last took %d)", full, last)
			}
		})
	}
}

// Once learned, the depth is kept for probeEvery claims before a claim
// tries twice as deep, and a claim without keyed events changes nothing.
func TestRunDepthProbesDeeper(t *testing.T) {
	var d runDepth
	d.observe(claimModel(1000, 8, 1000, 1000), 1000) // every run cut at 1
	if d.depth != 2 {
		t.Fatalf("depth %d after runs all cut at 1, want 2", d.depth)
	}
	d.observe([]outbox.OutboxEvent{{}, {}}, 1000)
	if d.depth != 2 {
		t.Fatalf("depth %d after a claim without keys, want it unchanged (2)", d.depth)
	}
	d.depth = 16
	d.observe(claimModel(1000, 8, 1000, 63), 1000) // runs of 8 under a cap of 16
	if d.depth != 8 || !d.learned {
		t.Fatalf("depth %d (learned %v) after runs of 8 ending under their cap, want 8 learned", d.depth, d.learned)
	}
	for i := range probeEvery {
		d.observe(claimModel(1000, 8, 1000, 125), 1000) // cut at 8: kept
		if d.depth != 8 {
			t.Fatalf("depth %d after %d claims cut at the learned depth, want 8 kept", d.depth, i+1)
		}
	}
	d.observe(claimModel(1000, 8, 1000, 125), 1000)
	if d.depth != 16 {
		t.Fatalf("depth %d after %d claims cut at the learned depth, want a probe at 16", d.depth, probeEvery+1)
	}
}

// Before any claim has taken keyed events a claim walks as many keys as
// it takes events: a backlog over many keys one event deep fills the
// first batch (and a relay made for one RunOnce claims a whole batch).
func TestRunDepthStartsWide(t *testing.T) {
	const limit, minHeads = 100, 1
	var d runDepth
	if h := d.heads(limit, minHeads); h != limit {
		t.Fatalf("first claim walks %d keys, want %d", h, limit)
	}
	if rows := claimModel(1000, 1, limit, d.heads(limit, minHeads)); len(rows) != limit {
		t.Fatalf("first claim over keys one event deep took %d events, want %d", len(rows), limit)
	}
}
