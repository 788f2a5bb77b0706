package consumetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// The variables that make a test binary run as the relay that
// relayKilledMidBatch kills: the case's name, its database and its
// destination.
const (
	childEnv = "OUTBOX_CONSUMETEST_CHILD"
	dsnEnv   = "OUTBOX_CONSUMETEST_DSN"
	destEnv  = "OUTBOX_CONSUMETEST_DEST"
)

// What the killed relay does: batches of killBatch, one at a time, the
// last published only in part when the relay hangs.
const (
	killEvents    = 300
	killBatch     = 50
	killPublished = 3*killBatch + killBatch/2 // then it hangs, half of its 4th batch in the broker
)

// relayKilledMidBatch: a relay SIGKILLed with half a batch in the broker
// that it never recorded; the next relay publishes those events again. Two
// consumers with an idempotent handler have each event's effect once.
func relayKilledMidBatch(t *testing.T, h *Harness) {
	if os.Getenv(childEnv) == t.Name() {
		runDoomedRelay(t, h)
		return
	}
	e := newEnv(t, h)
	ids := e.emit([]string{"", "k1", "k2"}, killEvents/3, typ)
	var mu sync.Mutex
	deliveries := map[string]int{}
	inner := e.idempotentEffect("kill", nil)
	var hd countingHandler = func(ctx context.Context, ev *outbox.Envelope) error {
		mu.Lock()
		deliveries[ev.ID]++
		mu.Unlock()
		return inner.Handle(ctx, ev)
	}
	e.consumer("c1", hd)
	e.consumer("c2", hd)
	hung := runChild(t, e)
	e.startRelay(relay.WithLease(2 * time.Second))
	e.waitEffects(ids, 120*time.Second)
	time.Sleep(300 * time.Millisecond)
	e.requireOnce(ids, e.effects())
	mu.Lock()
	defer mu.Unlock()
	dup := 0
	for _, id := range hung {
		if deliveries[id] > 1 {
			dup++
		}
	}
	t.Logf("%d events in the broker when the relay was killed, %d of them delivered again", len(hung), dup)
	if !h.BrokerDedupes && dup == 0 {
		t.Errorf("none of the %d events published by the killed relay reached a consumer twice: the case did not test duplicates", len(hung))
	}
}

type countingHandler func(ctx context.Context, ev *outbox.Envelope) error

func (f countingHandler) Handle(ctx context.Context, ev *outbox.Envelope) error { return f(ctx, ev) }

// runChild runs this case in a child process as the doomed relay, waits
// until it hangs mid-batch, SIGKILLs it, and returns the ids it had
// published in its last batch.
func runChild(t *testing.T, e *env) []string {
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(pattern, "/"), "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name(), dsnEnv+"="+e.dsn, destEnv+"="+e.dest)
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatal("the doomed relay ended before it hung")
			}
			if hung, found := strings.CutPrefix(l, "HUNG "); found {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return strings.Split(hung, ",")
			}
			t.Log("child: " + l)
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatal("the doomed relay did not hang within 90s")
		}
	}
}

// runDoomedRelay is the child: a relay that publishes killPublished
// events, prints the ids of its last, unfinished batch, and hangs until
// it is killed.
func runDoomedRelay(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	pub := &hangingPublisher{pub: h.NewPublisher(t)}
	r, err := relay.New(e.db, pub, relay.WithBatchSize(killBatch), relay.WithConcurrency(1),
		relay.WithLease(2*time.Second), relay.WithPollInterval(20*time.Millisecond), relay.WithListen(false),
		relay.WithLogger(quiet(t)))
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Start(context.Background())
}

// hangingPublisher publishes killPublished events, then prints the ids it
// published of the batch in hand and hangs.
type hangingPublisher struct {
	pub interface {
		Publish(ctx context.Context, e *outbox.Envelope) error
	}
	n    atomic.Int64
	mu   sync.Mutex
	last []string
}

func (p *hangingPublisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	n := p.n.Add(1)
	if n > killPublished {
		p.mu.Lock()
		fmt.Println("HUNG " + strings.Join(p.last, ","))
		p.mu.Unlock()
		select {}
	}
	if err := p.pub.Publish(ctx, e); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if (n-1)%killBatch == 0 {
		p.last = p.last[:0]
	}
	p.last = append(p.last, e.ID)
	return nil
}
