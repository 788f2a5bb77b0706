package relay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// minuteSample bounds the published events Throughput reads per minute:
// a minute with more is estimated from the rate of its first
// minuteSample events.
const minuteSample = 500

// MinuteStat is the delivery of one minute.
type MinuteStat struct {
	// MinutesAgo is how many whole minutes before now (by the database
	// clock) the minute ended: 0 is the current minute.
	MinutesAgo int
	// Published counts the events published in that minute that are
	// still in the table (retention deletes published events). When
	// Estimated, it is extrapolated from the rate of the minute's first
	// 500 publications.
	Published int64
	// Estimated reports that more than 500 events were published in the
	// minute, so that Published is an estimate and AvgLag the average of
	// the minute's first 500 events.
	Estimated bool
	// AvgLag is their average time from creation to publication.
	AvgLag time.Duration
}

// Throughput returns the events published per minute over the last
// window (default and at most 24 hours; an hour is the admin page's),
// one entry per minute, oldest first, minutes without any included.
//
// It reads the published index (published_at, migration 0006), at most
// the first 500 events of each minute: a busy minute's count is then
// estimated (MinuteStat.Estimated), so that the cost is bounded by the
// window's length, not by the traffic or the history in the table.
func (i *Inspector) Throughput(ctx context.Context, window time.Duration) ([]MinuteStat, error) {
	if window <= 0 || window > 24*time.Hour {
		window = 24 * time.Hour
	}
	minutes := int((window + time.Minute - 1) / time.Minute)
	o := i.at(ctx)
	out := make([]MinuteStat, minutes)
	for k := range out {
		out[k].MinutesAgo = minutes - 1 - k
	}
	for from := 0; from < minutes; from += 60 {
		query, args := o.throughputSQL(from, min(from+60, minutes))
		var rows []struct {
			MinutesAgo int
			N          int64
			LastAgo    *float64
			LagSeconds *float64
		}
		if err := o.db.Raw(query, args...).Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("relay: measuring throughput: %w", err)
		}
		for _, r := range rows {
			if r.MinutesAgo < 0 || r.MinutesAgo >= minutes {
				continue
			}
			s := &out[minutes-1-r.MinutesAgo]
			s.Published = r.N
			if r.N >= minuteSample && r.LastAgo != nil {
				s.Published, s.Estimated = extrapolate(r.MinutesAgo, *r.LastAgo), true
			}
			if r.LagSeconds != nil {
				s.AvgLag = time.Duration(*r.LagSeconds * float64(time.Second))
			}
		}
	}
	return out, nil
}

// extrapolate estimates the publications of the minute that ended
// minutesAgo whole minutes ago, whose minuteSample-th publication was
// lastAgo seconds ago.
func extrapolate(minutesAgo int, lastAgo float64) int64 {
	elapsed := float64(minutesAgo+1)*60 - lastAgo // seconds from the minute's start to that publication
	if elapsed < 0.001 {
		elapsed = 0.001
	}
	return max(int64(minuteSample*60/elapsed), minuteSample)
}

// throughputSQL reads minutes [from, to) ago, one UNION ALL arm per
// minute: the number of the minute's first minuteSample publications,
// how long ago the last of them was, and their average lag. Each arm
// reads the published index from the minute's start (bounds wrapped in
// a subquery, so that PostgreSQL evaluates the clock once and uses them
// as index bounds).
func (o *ops) throughputSQL(from, to int) (string, []any) {
	k := o.kind
	var sb strings.Builder
	var args []any
	for m := from; m < to; m++ {
		lo, loArgs := k.NowPlus(-time.Duration(m+1) * time.Minute)
		hi, hiArgs := k.NowPlus(-time.Duration(m) * time.Minute)
		if m > from {
			sb.WriteString(" UNION ALL ")
		}
		sb.WriteString("SELECT " + strconv.Itoa(m) + " AS minutes_ago, COUNT(*) AS n, MIN(ago) AS last_ago, AVG(lag) AS lag_seconds FROM (SELECT " +
			k.SecondsSince("published_at") + " AS ago, " + k.SecondsSince("created_at") + " - " + k.SecondsSince("published_at") +
			" AS lag FROM " + o.table + " WHERE status = 'published' AND published_at >= (SELECT " + lo + ") AND published_at < (SELECT " + hi +
			") ORDER BY published_at LIMIT " + strconv.Itoa(minuteSample) + ") p" + strconv.Itoa(m))
		args = append(append(args, loArgs...), hiArgs...)
	}
	return sb.String(), args
}
