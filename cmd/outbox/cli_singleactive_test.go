package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// stats shows the role of relays run with relay.WithSingleActive: one
// active, the other standby.
func TestStatsShowsSingleActiveRoles(t *testing.T) {
	u, db := cliDB(t, testenv.Postgres)
	cmd(t, u, "migrate").ok(t)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan error
	for _, id := range []string{"relay-a", "relay-b"} {
		r, err := relay.New(db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }),
			relay.WithWorkerID(id), relay.WithSingleActive(), relay.WithHeartbeat(100*time.Millisecond),
			relay.WithLogger(testenv.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan error, 1)
		go func() { ch <- r.Start(ctx) }()
		done = append(done, ch)
		time.Sleep(200 * time.Millisecond) // relay-a takes the lock first
	}
	defer func() {
		cancel()
		for _, ch := range done {
			<-ch
		}
	}()
	var roles string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		stats := decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout)
		roles = ""
		for _, r := range stats.Relays {
			roles += fmt.Sprintf("%s=%s,%s ", r.ID, r.Role, r.Publisher)
		}
		if roles == "relay-a=active,relay.PublisherFunc relay-b=standby,relay.PublisherFunc " {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if roles != "relay-a=active,relay.PublisherFunc relay-b=standby,relay.PublisherFunc " {
		t.Fatalf("stats --json roles: %q", roles)
	}
	text := cmd(t, u, "stats").ok(t).stdout
	for _, want := range []string{"live (active)", "live (standby)"} {
		if !strings.Contains(text, want) {
			t.Errorf("stats text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "WARNING") {
		t.Errorf("stats warns about relays that deliver to one place:\n%s", text)
	}
}
