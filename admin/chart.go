package admin

import (
	"fmt"
	"strings"
	"time"

	"github.com/gormoutbox/outbox/relay"
)

// chart is the overview's SVG of the last hour: a bar per minute of
// events published, and a line of their average lag.
type chart struct {
	Width, Height int
	Bars          []bar
	LagLine       string // polyline points
	MaxPublished  int64
	MaxLag        string
	Total         int64
	// Estimated reports that some minute had more than 20,000
	// publications, so that its count (and the total) are estimates.
	Estimated bool
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

const chartW, chartH = 720, 140

// newChart lays minutes (oldest first) out on the chart.
func newChart(minutes []relay.MinuteStat) chart {
	c := chart{Width: chartW, Height: chartH, MaxPublished: 1}
	var maxLag time.Duration
	for _, m := range minutes {
		c.MaxPublished = max(c.MaxPublished, m.Published)
		maxLag = max(maxLag, m.AvgLag)
		c.Total += m.Published
		c.Estimated = c.Estimated || m.Estimated
	}
	if len(minutes) == 0 {
		return c
	}
	w := float64(chartW) / float64(len(minutes))
	var pts []string
	for k, m := range minutes {
		h := float64(chartH-10) * float64(m.Published) / float64(c.MaxPublished)
		approx := ""
		if m.Estimated {
			approx = "≈"
		}
		c.Bars = append(c.Bars, bar{X: float64(k) * w, Y: float64(chartH) - h, W: max(w-1, 1), H: h,
			Title: fmt.Sprintf("%d min ago: %s%d published, average lag %s", m.MinutesAgo, approx, m.Published, ago(m.AvgLag))})
		if maxLag > 0 && m.Published > 0 {
			y := float64(chartH) - float64(chartH-10)*float64(m.AvgLag)/float64(maxLag)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(k)*w+w/2, y))
		}
	}
	c.LagLine = strings.Join(pts, " ")
	c.MaxLag = ago(maxLag)
	return c
}
