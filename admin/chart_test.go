package admin_test

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

var totalRE = regexp.MustCompile(`\((≈&#8239;)?(\d+) in total`)

// A relay drains a burst of 10,000 events: the overview's chart says
// 10,000 published in the last hour (within 10%; it counts them), where
// it said about a tenth, extrapolating each minute from its first 500.
func TestChartCountsABurst(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		testenv.Emit(t, db, 10000, func(int) outbox.Event { return outbox.Event{Type: "burst", Payload: 1} })
		r, err := relay.New(db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }),
			relay.WithBatchSize(1000), relay.WithConcurrency(8), relay.WithLogger(slog.New(slog.DiscardHandler)))
		must(t, err)
		for deadline := time.Now().Add(2 * time.Minute); statusCount(t, db, "published") < 10000; {
			if time.Now().After(deadline) {
				t.Fatalf("the relay published %d of 10,000 in two minutes", statusCount(t, db, "published"))
			}
			_, err := r.RunOnce(t.Context())
			must(t, err)
		}
		code, body := newClient(t, newHandler(t, db)).get("/")
		m := totalRE.FindStringSubmatch(body)
		if code != http.StatusOK || m == nil {
			t.Fatalf("overview: %d, no total:\n%s", code, body)
		}
		if n, _ := strconv.Atoi(m[2]); n < 9000 || n > 11000 || m[1] != "" {
			t.Errorf("the chart says %s%d published in the last hour, want 10,000 within 10%%, counted", m[1], n)
		}
	})
}
