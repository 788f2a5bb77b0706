package relay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// minuteCap bounds the published events Throughput counts in one
	// minute: a busier minute is extrapolated from the rate of its first
	// minuteCap publications.
	minuteCap = 20000
	// lagSample is how many of a minute's first publications its average
	// lag is measured on.
	lagSample = 500
	// settleAfter is how long after its end a minute is counted for good:
	// a completion that set published_at commits within it.
	settleAfter = 10 * time.Second
)

// MinuteStat is the delivery of one minute of the database clock.
type MinuteStat struct {
	// Start is the minute's first instant by the database clock, UTC
	// (minutes are whole minutes of that clock).
	Start time.Time
	// MinutesAgo is how many whole minutes before the current one the
	// minute is: 0 is the current minute, which has not ended.
	MinutesAgo int
	// Published counts the events published in that minute that were in
	// the table when it was counted (retention deletes published events;
	// an ended minute is counted once by an Inspector and remembered). It
	// is exact up to 20,000; beyond, Estimated.
	Published int64
	// Estimated reports that more than 20,000 events were published in the
	// minute: Published is extrapolated from the rate of its first 20,000.
	Estimated bool
	// AvgLag is the average time from creation to publication of the
	// minute's first 500 publications.
	AvgLag time.Duration
}

// minuteCache remembers the counts of settled minutes, by start.
type minuteCache struct {
	mu  sync.Mutex
	m   map[int64]MinuteStat // by Start in Unix minutes
	cap int64                // minuteCap, or a test's
}

// limit is the most publications a minute's count reads.
func (c *minuteCache) limit() int64 {
	if c.cap > 0 {
		return c.cap
	}
	return minuteCap
}

func (c *minuteCache) get(start time.Time) (MinuteStat, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[start.Unix()/60]
	return s, ok
}

// put remembers s, and forgets minutes older than oldest.
func (c *minuteCache) put(s MinuteStat, oldest time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[int64]MinuteStat{}
	}
	c.m[s.Start.Unix()/60] = s
	for k := range c.m {
		if k < oldest.Unix()/60 {
			delete(c.m, k)
		}
	}
}

// Throughput returns the events published per minute of the database
// clock over the last window (default and at most 24 hours; an hour is
// the admin page's), one entry per minute, oldest first, the current
// minute last, minutes without any included.
//
// It counts each minute's publications through the published index
// (published_at, migration 0006), at most 20,000 of them (a busier minute
// is estimated, MinuteStat.Estimated). A minute that ended more than 10
// seconds ago (a completion that set published_at in it has committed)
// is counted once and remembered by the Inspector, so that a refresh
// reads only the current minute's publications (and the last one's, in
// its first 10 seconds): the cost is the traffic of the window once,
// never the history in the table.
func (i *Inspector) Throughput(ctx context.Context, window time.Duration) ([]MinuteStat, error) {
	if window <= 0 || window > 24*time.Hour {
		window = 24 * time.Hour
	}
	o := i.at(ctx)
	now, err := o.dbNow()
	if err != nil {
		return nil, err
	}
	minutes := int((window + time.Minute - 1) / time.Minute)
	current := now.Truncate(time.Minute)
	out := make([]MinuteStat, minutes)
	var todo []int
	for k := range out {
		ago := minutes - 1 - k
		start := current.Add(-time.Duration(ago) * time.Minute)
		if s, ok := i.minutes.get(start); ok {
			out[k] = s
			out[k].MinutesAgo = ago
			continue
		}
		out[k] = MinuteStat{Start: start, MinutesAgo: ago}
		todo = append(todo, k)
	}
	for len(todo) > 0 {
		n := min(len(todo), 60)
		if err := o.countMinutes(now, i.minutes.limit(), out, todo[:n]); err != nil {
			return nil, err
		}
		for _, k := range todo[:n] {
			if !out[k].Start.Add(time.Minute + settleAfter).After(now) {
				i.minutes.put(out[k], current.Add(-24*time.Hour))
			}
		}
		todo = todo[n:]
	}
	return out, nil
}

// countMinutes counts the minutes out[k] for k in todo, in one
// statement, each up to limit publications.
func (o *ops) countMinutes(now time.Time, limit int64, out []MinuteStat, todo []int) error {
	query, args := o.throughputSQL(limit, out, todo)
	var rows []struct {
		Idx        int
		N          int64
		LastAgo    *float64
		LagSeconds *float64
	}
	if err := o.db.Raw(query, args...).Scan(&rows).Error; err != nil {
		return fmt.Errorf("relay: measuring throughput: %w", err)
	}
	for _, r := range rows {
		if r.Idx < 0 || r.Idx >= len(out) {
			continue
		}
		s := &out[r.Idx]
		s.Published = r.N
		if r.N >= limit && r.LastAgo != nil {
			s.Published, s.Estimated = extrapolate(limit, now.Sub(s.Start).Seconds()-*r.LastAgo), true
		}
		if r.LagSeconds != nil {
			s.AvgLag = time.Duration(*r.LagSeconds * float64(time.Second))
		}
	}
	return nil
}

// extrapolate estimates the publications of a minute whose limit-th
// publication came elapsed seconds after the minute's start.
func extrapolate(limit int64, elapsed float64) int64 {
	elapsed = max(elapsed, 0.001)
	return max(int64(float64(limit)*60/elapsed), limit)
}

// throughputSQL counts the minutes out[k] for k in todo, one UNION ALL
// arm per minute: how many of the minute's first limit publications
// there are, how long ago the last of them was, and the average lag of
// its first lagSample. Each reads the published index in published_at
// order between the minute's bounds, bound as values.
func (o *ops) throughputSQL(limit int64, out []MinuteStat, todo []int) (string, []any) {
	k := o.kind
	var sb strings.Builder
	var args []any
	for n, idx := range todo {
		lo, hi := k.Time(out[idx].Start), k.Time(out[idx].Start.Add(time.Minute))
		if n > 0 {
			sb.WriteString(" UNION ALL ")
		}
		in := " FROM " + o.table + " WHERE status = 'published' AND published_at >= ? AND published_at < ? ORDER BY published_at LIMIT "
		sb.WriteString("SELECT " + strconv.Itoa(idx) + " AS idx, c.n AS n, c.last_ago AS last_ago, l.lag AS lag_seconds FROM " +
			"(SELECT COUNT(*) AS n, " + k.SecondsSince("MAX(published_at)") + " AS last_ago FROM (SELECT published_at" + in +
			strconv.FormatInt(limit, 10) + ") a) c, (SELECT AVG(lag) AS lag FROM (SELECT " + k.SecondsSince("created_at") + " - " +
			k.SecondsSince("published_at") + " AS lag" + in + strconv.Itoa(lagSample) + ") b) l")
		args = append(args, lo, hi, lo, hi)
	}
	return sb.String(), args
}
