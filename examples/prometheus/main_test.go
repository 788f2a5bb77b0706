package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

// The Prometheus endpoint reports what the relay did.
func TestMetricsReachPrometheus(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), "127.0.0.1:0", 100, false, &out); err != nil {
		t.Fatal(err)
	}
	value := func(re string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + re + `(?:\{[^}]*\})? ([0-9.e+]+)$`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no %s in:\n%s", re, out.String())
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	if v := value(`outbox_events_published_total`); v != 100 {
		t.Errorf("published = %v, want 100", v)
	}
	if v := value(`outbox_events_failed_total`); v != 10 {
		t.Errorf("failed = %v, want 10 (every tenth event failed once)", v)
	}
	if v := value(`outbox_events_claimed_total`); v != 110 {
		t.Errorf("claimed = %v, want 110", v)
	}
	if v := value(`outbox_publish_duration_seconds_count`); v != 110 {
		t.Errorf("publish duration observations = %v, want 110", v)
	}
	if v := value(`outbox_events_pending`); v != 0 {
		t.Errorf("pending gauge = %v, want 0", v)
	}
	value(`outbox_events_oldest_pending_age_seconds`)
	value(`outbox_event_lag_seconds_count`)
}
