package consume

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/gormoutbox/outbox"
)

// fake is an in-memory Transport: Receive returns what was put in, once;
// settlements are recorded.
type fake struct {
	mu      sync.Mutex
	queue   []*fakeMsg
	settled []settlement
	recvErr error
	closed  bool
	batch   int
}

type settlement struct {
	id      string
	kind    string // ack, retry, dead
	delay   time.Duration
	counted bool
	reason  error
}

type fakeMsg struct {
	f       *fake
	id      string
	data    []byte
	attempt int
	start   Start
	key     string
}

func (f *fake) System() string      { return "fake" }
func (f *fake) Destination() string { return "q" }

func (f *fake) Receive(ctx context.Context) ([]Message, error) {
	f.mu.Lock()
	if f.recvErr != nil {
		err := f.recvErr
		f.recvErr = nil
		f.mu.Unlock()
		return nil, err
	}
	n := len(f.queue)
	if f.batch > 0 {
		n = min(n, f.batch)
	}
	got := f.queue[:n]
	f.queue = f.queue[n:]
	f.mu.Unlock()
	if len(got) == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
		return nil, nil
	}
	out := make([]Message, len(got))
	for i, m := range got {
		out[i] = m
	}
	return out, nil
}

func (f *fake) Close(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// put queues an event (or raw bytes) and returns its message.
func (f *fake) put(e outbox.Envelope, attempt int) *fakeMsg {
	data, err := json.Marshal(&e)
	if err != nil {
		panic(err)
	}
	return f.putRaw(e.ID, data, attempt)
}

func (f *fake) putRaw(id string, data []byte, attempt int) *fakeMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &fakeMsg{f: f, id: id, data: data, attempt: attempt}
	f.queue = append(f.queue, m)
	return m
}

func (f *fake) record(s settlement) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, s)
	return nil
}

// settlements returns the settlements of id, in order.
func (f *fake) settlements(id string) []settlement {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []settlement
	for _, s := range f.settled {
		if s.id == id {
			out = append(out, s)
		}
	}
	return out
}

func (m *fakeMsg) Envelope() (*outbox.Envelope, error)  { return outbox.DecodeEnvelope(m.data) }
func (m *fakeMsg) Begin(context.Context) (Start, error) { return m.start, nil }
func (m *fakeMsg) Delivery() Delivery                   { return Delivery{Attempt: m.attempt, Details: m.id} }
func (m *fakeMsg) Ack(context.Context) error            { return m.f.record(settlement{id: m.id, kind: "ack"}) }
func (m *fakeMsg) Retry(_ context.Context, d time.Duration, counted bool) error {
	return m.f.record(settlement{id: m.id, kind: "retry", delay: d, counted: counted})
}
func (m *fakeMsg) Dead(_ context.Context, reason error) error {
	return m.f.record(settlement{id: m.id, kind: "dead", reason: reason})
}

type keyedMsg struct {
	*fakeMsg
}

func (m keyedMsg) OrderKey() string { return m.key }

// event returns an envelope of id, of key, with a JSON payload.
func event(id, key string) outbox.Envelope {
	return outbox.Envelope{ID: id, Type: "thing.done", Source: "test", PartitionKey: key,
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%q}`, id)), CreatedAt: time.Now().UTC(), Attempt: 1}
}
