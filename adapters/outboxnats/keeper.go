package outboxnats

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// keeper keeps the fetched messages in progress while this consumer holds
// them: those waiting in the fetch or the batch behind the messages being
// handled, and those while their handler runs (consume.WithHandlerTimeout
// may exceed the ack wait). Every third of the ack wait it sends each held
// message's progress (+WPI), which restarts its ack wait, so that the
// server does not deliver it to another consumer of the durable
// meanwhile. A message is held from its arrival in a fetch until it is
// settled (Ack, Retry, Dead drop it first), after which no progress is
// sent for it.
type keeper struct {
	mu   sync.Mutex
	held map[jetstream.Msg]struct{}
	stop func()
}

// keep starts keeping messages, every interval, until close.
func keep(interval time.Duration) *keeper {
	k := &keeper{held: map[jetstream.Msg]struct{}{}}
	k.stop = adapterkit.Every(interval, k.progress)
	return k
}

// add holds msg.
func (k *keeper) add(msg jetstream.Msg) {
	k.mu.Lock()
	k.held[msg] = struct{}{}
	k.mu.Unlock()
}

// drop stops keeping msg; a progress being sent for it completes first.
func (k *keeper) drop(msg jetstream.Msg) {
	if k == nil {
		return
	}
	k.mu.Lock()
	delete(k.held, msg)
	k.mu.Unlock()
}

// progress restarts the ack wait of every held message.
func (k *keeper) progress() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for msg := range k.held {
		_ = msg.InProgress() // a failed one: the next try, or the ack wait, tells
	}
}

// close stops keeping, and returns once no progress is being sent.
func (k *keeper) close() { k.stop() }
