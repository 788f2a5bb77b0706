package relay_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func TestNewValidatesOptions(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	pub := newRecorder()
	cases := []struct {
		opt  relay.Option
		want string
	}{
		{relay.WithBatchSize(0), "batch size"},
		{relay.WithBatchSize(10001), "batch size"},
		{relay.WithPollInterval(0), "poll interval"},
		{relay.WithLease(100 * time.Millisecond), "lease"},
		{relay.WithConcurrency(0), "concurrency"},
		{relay.WithMaxAttempts(0), "max attempts"},
		{relay.WithBackoff(nil), "backoff"},
		{relay.WithWorkerID(""), "worker id"},
		{relay.WithWorkerID(strings.Repeat("w", 129)), "worker id"},
		{relay.WithLogger(nil), "logger"},
		{relay.WithRegistry(nil), "registry is nil"},
		{relay.WithRegistry(outbox.NewRegistry(outbox.RequireMetadata("ip"))), `RequireMetadata: unknown field "ip"`},
		{relay.WithReplicationDSN(""), "replication DSN"},
		{relay.WithWALWarning(-1, time.Minute), "WAL warning"},
		{relay.WithWALSpillAfter(time.Millisecond), "WAL spill delay"},
	}
	for _, c := range cases {
		_, err := relay.New(db, pub, c.opt)
		if !errors.Is(err, relay.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want ErrInvalidOption naming %q", err, c.want)
		}
	}
	if _, err := relay.New(db, nil); !errors.Is(err, relay.ErrInvalidOption) {
		t.Errorf("nil publisher: err = %v", err)
	}
	if _, err := relay.New(nil, pub); !errors.Is(err, relay.ErrInvalidOption) {
		t.Errorf("nil db: err = %v", err)
	}
	must(t, outbox.Migrate(db))
	r, err := relay.New(db, pub)
	if err != nil {
		t.Fatal(err)
	}
	if id := r.WorkerID(); id == "" || !strings.Contains(id, "-") {
		t.Errorf("default worker id %q, want host-pid-random", id)
	}
}

func TestDefaultBackoff(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 12: 2048 * time.Second, 13: time.Hour, 30: time.Hour} {
		for range 50 {
			d := relay.DefaultBackoff(attempt)
			if d < want/2 || d > want {
				t.Fatalf("DefaultBackoff(%d) = %v, want within [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[relay.DefaultBackoff(3)] = true
	}
	if len(seen) < 5 {
		t.Error("DefaultBackoff has no jitter")
	}
}

type misconfigured struct{ relay.PublisherFunc }

func (misconfigured) Validate() error { return errors.New("queue name is empty") }

func TestNewRefusesAnInvalidPublisher(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	_, err := relay.New(db, misconfigured{})
	if !errors.Is(err, relay.ErrInvalidOption) || !strings.Contains(err.Error(), "queue name is empty") {
		t.Errorf("err = %v, want ErrInvalidOption with the publisher's reason", err)
	}
}
