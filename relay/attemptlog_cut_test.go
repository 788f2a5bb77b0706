package relay_test

import (
	"testing"
	"time"

	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// A completion retried after a connection cut, and an outcome recorded
// late by the relay's own rescue after a long outage, each leave exactly
// one record: the published claim.
func TestAttemptLogThroughConnectionCuts(t *testing.T) {
	for _, dialect := range []string{testenv.Postgres, testenv.MySQL} {
		for _, c := range []struct {
			name          string
			outage, lease time.Duration
		}{{"retried", 300 * time.Millisecond, 2 * time.Second}, {"late", 2500 * time.Millisecond, time.Second}} {
			t.Run(dialect+"/"+c.name, func(t *testing.T) {
				direct, proxied, p := throughProxy(t, dialect)
				emitN(t, direct, 1, event)
				restored := make(chan struct{})
				r := newRelay(t, proxied, cutAfterPublish(p, c.outage, restored), relay.WithMaxAttempts(1),
					relay.WithLease(c.lease), relay.WithListen(false), relay.WithAttemptLog(), relay.WithWorkerID("cut"))
				_, _ = r.RunOnce(t.Context())
				<-restored
				time.Sleep(c.lease + 500*time.Millisecond) // past the lease: a rescue would find it
				_, err := r.RunOnce(t.Context())
				must(t, err)
				wantAttempts(t, attemptsOf(t, direct, event(0).ID),
					relay.Attempt{Outcome: relay.AttemptPublished, Attempt: 1, ClaimVersion: 1, RelayID: "cut"})
			})
		}
	}
}
