package outboxnats

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// keeper keeps the messages of a fetched batch in progress while this
// consumer holds them: those waiting behind the message being handled,
// and that one while its handler runs (WithHandlerTimeout may exceed the
// ack wait). Every third of the ack wait it sends each held message's
// progress (+WPI), which restarts its ack wait, so that the server does
// not deliver it to another consumer of the durable meanwhile. A message
// is held from the moment it is fetched until it is settled (keptMsg's
// Ack, Nak, Term…), after which no progress is sent for it.
type keeper struct {
	mu   sync.Mutex
	held map[jetstream.Msg]struct{}
	stop chan struct{}
	done chan struct{}
}

// keep starts keeping messages, every interval, until close.
func keep(interval time.Duration) *keeper {
	k := &keeper{held: map[jetstream.Msg]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
				k.progress()
			}
		}
	}()
	return k
}

// add holds msg and returns it wrapped, so that settling it drops it.
func (k *keeper) add(msg jetstream.Msg) keptMsg {
	k.mu.Lock()
	k.held[msg] = struct{}{}
	k.mu.Unlock()
	return keptMsg{Msg: msg, k: k}
}

// drop stops keeping msg; a progress being sent for it completes first.
func (k *keeper) drop(msg jetstream.Msg) {
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
func (k *keeper) close() {
	close(k.stop)
	<-k.done
}

// keptMsg is a message held by a keeper: settling it drops it first.
type keptMsg struct {
	jetstream.Msg
	k *keeper
}

func (m keptMsg) Ack() error { m.k.drop(m.Msg); return m.Msg.Ack() }

func (m keptMsg) DoubleAck(ctx context.Context) error { m.k.drop(m.Msg); return m.Msg.DoubleAck(ctx) }

func (m keptMsg) Nak() error { m.k.drop(m.Msg); return m.Msg.Nak() }

func (m keptMsg) NakWithDelay(d time.Duration) error { m.k.drop(m.Msg); return m.Msg.NakWithDelay(d) }

func (m keptMsg) Term() error { m.k.drop(m.Msg); return m.Msg.Term() }

func (m keptMsg) TermWithReason(reason string) error {
	m.k.drop(m.Msg)
	return m.Msg.TermWithReason(reason)
}
