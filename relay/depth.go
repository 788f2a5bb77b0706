package relay

import (
	"sync"

	"github.com/gormoutbox/outbox"
)

// probeEvery is how many claims in a row take runs of the depth learned,
// each cut at that depth, before one claim tries twice as deep. A probe
// over keys no deeper than learned takes half a batch (as many keys, runs
// no longer), while a depth learned too shallow costs only a longer walk
// (an index step per extra key, about 8 µs on PostgreSQL): probes are rare.
const probeEvery = 32

// runDepth is how many events of each partition key a claim aims to take:
// a claim of limit events walks at most ceil(limit/depth) keys and takes
// a run of up to ceil(limit/keys found) events of each. Walking the keys
// costs an index descent per key, the next event of a key a step along
// the index, so a backlog of keys several events deep is claimed far more
// cheaply in long runs over few keys than in one event of every key.
//
// The depth is learned from the claims: it starts at 1 (a claim walks as
// many keys as it takes events, so that a backlog over many keys one event
// deep fills the first batch, and a relay made for one RunOnce claims a
// whole batch), doubles while most keys had more events than the claim
// took of them, and falls to the keys' average run when most had fewer.
// (Starting deep, with the fewest keys, learns a deep backlog in one claim
// but cuts the first claims of every relay short over keys one event
// deep.) Once learned from runs that ended, it is kept, each run cut at
// its cap, for probeEvery claims before one claim tries deeper runs. A
// claim walks at least as many keys as the relay delivers runs at once
// (WithConcurrency), so that a batch of a few deep keys still delivers
// them side by side.
type runDepth struct {
	mu      sync.Mutex
	depth   int  // at least 1 (0 is read as 1)
	learned bool // depth is the average of runs that ended before their cap
	kept    int  // claims cut at the learned depth since it was learned
}

// heads returns the most keys a claim of limit events walks, when the
// relay delivers minHeads runs at once.
func (d *runDepth) heads(limit, minHeads int) int {
	d.mu.Lock()
	depth := max(d.depth, 1)
	d.mu.Unlock()
	return min(limit, max((limit+depth-1)/depth, minHeads))
}

// observe learns from the keyed events of a claim of limit events, and
// returns how many partition keys they have.
func (d *runDepth) observe(rows []outbox.OutboxEvent, limit int) (keys int) {
	runs := map[string]int{}
	total := 0
	for i := range rows {
		if k := rows[i].PartitionKey; k != "" {
			runs[k]++
			total++
		}
	}
	if len(runs) == 0 {
		return 0
	}
	most := (limit + len(runs) - 1) / len(runs) // the longest run the claim could take
	capped := 0
	for _, n := range runs {
		if n >= most {
			capped++
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case 2*capped <= len(runs): // most keys ran out: this is their depth
		d.depth = max(1, (total+len(runs)-1)/len(runs))
		d.learned, d.kept = true, 0
	case d.learned && d.kept < probeEvery:
		d.kept++
	default: // deeper than the claim took: try twice as deep
		d.depth = min(2*max(d.depth, most), max(limit, 1))
		d.learned, d.kept = false, 0
	}
	return len(runs)
}
