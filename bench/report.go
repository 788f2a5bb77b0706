package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// report gathers the run's figures.
type report struct {
	writes    []*writeResult
	drains    []drainResult
	latencies []latencyResult
}

func (r *report) print(w io.Writer, settings string, took time.Duration) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "# gorm-outbox bench\n\n%s, %d CPUs, load %s, %s; %s of runs.\n\n", settings, runtime.NumCPU(),
		strings.Join(strings.Fields(string(load))[:3], " "), runtime.Version(), took.Round(time.Second))
	r.printWrites(w)
	r.printDrains(w)
	r.printLatencies(w)
	r.printGoals(w)
}

func (r *report) find(name string) *writeResult {
	for _, v := range r.writes {
		if v.name == name {
			return v
		}
	}
	return nil
}

func (r *report) printWrites(w io.Writer) {
	base := r.find("baseline")
	fmt.Fprintf(w, "## Write path: BEGIN; INSERT order; [the outbox's write]; COMMIT\n\n%d rounds, variants interleaved; added = median over rounds of (variant − baseline) in the same round.\n\n", len(base.roundUS))
	fmt.Fprintln(w, "| variant | µs/tx (median of rounds) | added µs/tx | server CPU µs/tx | added server CPU µs/tx | added client CPU µs/tx |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, v := range r.writes {
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %.1f | %.1f | %.1f |\n", v.name, median(v.roundUS), added(base, v), cpuPerTx(v),
			cpuPerTx(v)-cpuPerTx(base), clientPerTx(v)-clientPerTx(base))
	}
	fmt.Fprintln(w)
}

func cpuPerTx(v *writeResult) float64 { return v.serverCPU * 1e6 / float64(max(v.txs, 1)) }

func clientPerTx(v *writeResult) float64 { return v.clientCPU * 1e6 / float64(max(v.txs, 1)) }

func (r *report) printDrains(w io.Writer) {
	fmt.Fprintln(w, "## Relay drain: a backlog written beforehand (not timed), delivered to a no-op publisher")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Each drain ran %d times, the drains interleaved in rotated order; the figures are medians (events/s: the median time's), the rounds' rates beside them.\n\n", len(r.drains[0].rates))
	fmt.Fprintln(w, "| relay | events | s | events/s | server CPU µs/event | client CPU µs/event | rounds' events/s | note |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|---|")
	for _, d := range r.drains {
		rates := make([]string, len(d.rates))
		for i, x := range d.rates {
			rates[i] = fmt.Sprintf("%.0f", x)
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %.0f | %.1f | %.1f | %s | %s |\n", d.spec.name, d.events, d.elapsed.Seconds(), d.perSec(),
			d.serverCPU*1e6/float64(d.events), d.clientCPU*1e6/float64(d.events), strings.Join(rates, ", "), d.note)
	}
	fmt.Fprintln(w)
}

func (r *report) printLatencies(w io.Writer) {
	fmt.Fprintln(w, "## Commit to publish: one event per transaction, 2 ms apart, from the COMMIT sent to the publish")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| relay | events | p50 ms | p95 ms | p99 ms | max ms |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, l := range r.latencies {
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.2f | %.2f |\n", l.spec.name, len(l.lat), ms(l.pct(0.5)), ms(l.pct(0.95)),
			ms(l.pct(0.99)), ms(l.lat[len(l.lat)-1]))
	}
	fmt.Fprintln(w)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r *report) drain(name string) drainResult {
	for _, d := range r.drains {
		if d.spec.name == name {
			return d
		}
	}
	return drainResult{}
}

func (r *report) printGoals(w io.Writer) {
	base, raw, wal := r.find("baseline"), r.find("raw INSERT"), r.find("gorm-outbox WAL mode")
	walD, tabD := r.drain(drains[2].name), r.drain(drains[0].name)
	raw100, raw1000 := r.drain(drains[4].name), r.drain(drains[5].name)
	walCPU := walD.serverCPU / float64(walD.events)
	tabCPU := tabD.serverCPU / float64(tabD.events)
	var walLat latencyResult
	for _, l := range r.latencies {
		if l.spec.system == "ours-wal" {
			walLat = l
		}
	}
	fmt.Fprintln(w, "## WAL mode's goals, as ratios of this run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| goal | measured | |")
	fmt.Fprintln(w, "|---|---:|---|")
	goal := func(name string, v float64, ok bool, unit string) {
		mark := "met"
		if !ok {
			mark = "**missed**"
		}
		fmt.Fprintf(w, "| %s | %.2f%s | %s |\n", name, v, unit, mark)
	}
	wr := added(base, wal) / added(base, raw)
	goal("write added cost ≤ 0.7 × raw INSERT's", wr, wr <= 0.7, "×")
	goal("relay ≥ 2 × table mode (1 relay each)", walD.perSec()/tabD.perSec(), walD.perSec() >= 2*tabD.perSec(), "×")
	goal("relay ≥ 2 × raw SKIP LOCKED loop, batch 100 (1 relay each)", walD.perSec()/raw100.perSec(), walD.perSec() >= 2*raw100.perSec(), "×")
	goal("relay ≥ 2 × raw SKIP LOCKED loop, batch 1000 (1 relay each)", walD.perSec()/raw1000.perSec(), walD.perSec() >= 2*raw1000.perSec(), "×")
	goal("server CPU per event ≤ 0.5 × table mode's", walCPU/tabCPU, walCPU <= tabCPU/2, "×")
	if len(walLat.lat) > 0 {
		goal("commit-to-publish p50 ≤ 1 ms", ms(walLat.pct(0.5)), walLat.pct(0.5) <= time.Millisecond, " ms")
		goal("commit-to-publish p99 ≤ 5 ms", ms(walLat.pct(0.99)), walLat.pct(0.99) <= 5*time.Millisecond, " ms")
	}
}
