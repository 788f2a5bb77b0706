package consumetest_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/consume/consumetest"
	"github.com/gormoutbox/outbox/internal/testdb"
	"github.com/gormoutbox/outbox/relay"
)

// memBroker is a broker in memory: one queue per destination, shared by
// its consumers, with delayed redelivery and a dead-letter list. It proves
// the suite against the policy alone (its cases must pass on a transport
// that does what Transport asks, and nothing more).
type memBroker struct {
	mu     sync.Mutex
	queues map[string]*memQueue
}

type memQueue struct {
	ready []*memMsg
	dead  []string
}

type memMsg struct {
	b        *memBroker
	dest     string
	data     []byte
	id       string
	attempts int // counted runs
}

var broker = &memBroker{queues: map[string]*memQueue{}}

func (b *memBroker) queue(dest string) *memQueue {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[dest]
	if q == nil {
		q = &memQueue{}
		b.queues[dest] = q
	}
	return q
}

func (b *memBroker) put(m *memMsg) {
	q := b.queue(m.dest)
	b.mu.Lock()
	defer b.mu.Unlock()
	q.ready = append(q.ready, m)
}

type memPublisher struct{ b *memBroker }

func (p memPublisher) Publish(_ context.Context, e *outbox.Envelope) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	p.b.put(&memMsg{b: p.b, dest: e.Topic, data: data, id: e.ID})
	return nil
}

type memTransport struct {
	b    *memBroker
	dest string
}

func (t memTransport) System() string      { return "memory" }
func (t memTransport) Destination() string { return t.dest }

func (t memTransport) Receive(ctx context.Context) ([]consume.Message, error) {
	q := t.b.queue(t.dest)
	t.b.mu.Lock()
	n := min(len(q.ready), 10)
	got := q.ready[:n:n]
	q.ready = q.ready[n:]
	t.b.mu.Unlock()
	if n == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
		return nil, nil
	}
	out := make([]consume.Message, n)
	for i, m := range got {
		out[i] = m
	}
	return out, nil
}

func (m *memMsg) Envelope() (*outbox.Envelope, error)          { return outbox.DecodeEnvelope(m.data) }
func (m *memMsg) Begin(context.Context) (consume.Start, error) { return consume.Run, nil }
func (m *memMsg) Delivery() consume.Delivery                   { return consume.Delivery{Attempt: m.attempts + 1} }
func (m *memMsg) Ack(context.Context) error                    { return nil }

func (m *memMsg) Retry(_ context.Context, delay time.Duration, counted bool) error {
	if counted {
		m.attempts++
	}
	time.AfterFunc(delay, func() { m.b.put(m) })
	return nil
}

func (m *memMsg) Dead(context.Context, error) error {
	q := m.b.queue(m.dest)
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	q.dead = append(q.dead, m.id)
	return nil
}

func TestConformance(t *testing.T) {
	consumetest.Exercise(t, consumetest.Harness{
		NewPublisher: func(testing.TB) relay.Publisher { return memPublisher{broker} },
		NewDest:      func(testing.TB) string { return "q" + testdb.RandomHex(6) },
		NewConsumer: func(t testing.TB, dest, _ string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
			c, err := consume.New(memTransport{broker, dest}, h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Skip: map[string]string{"RelayKilledMidBatch": "the broker is in this process's memory: the killed relay's child process cannot reach it"},
		DeadLetters: func(_ testing.TB, dest string) []string {
			q := broker.queue(dest)
			broker.mu.Lock()
			defer broker.mu.Unlock()
			return append([]string(nil), q.dead...)
		},
	})
}
