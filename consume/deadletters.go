package consume

import (
	"context"
	"time"

	"github.com/gormoutbox/outbox"
)

// DeadLetterReader is implemented by adapters whose consumers keep the
// messages they sent to the dead letter where they can be read again (a
// dead-letter stream, queue, subject or topic, or asynq's archive), so
// that the admin page and the CLI list them beside the outbox's own dead
// events: a consumer's failure is an outbox row that says published.
type DeadLetterReader interface {
	// DeadLetters returns up to limit dead messages after cursor (""
	// for the first page), oldest first, and the cursor of the next page
	// ("" when there is none). Reading changes nothing.
	DeadLetters(ctx context.Context, cursor string, limit int) (page []DeadMessage, next string, err error)
}

// DeadLetterReplayer is implemented by dead-letter readers whose broker
// lets a dead message be consumed again.
type DeadLetterReplayer interface {
	// ReplayDead hands the dead messages of ids (DeadMessage.ID) back to
	// their consumers and removes them from the dead letter, and returns
	// how many it replayed; ids no longer there are skipped.
	ReplayDead(ctx context.Context, ids ...string) (int, error)
}

// DeadMessage is a message in a consumer's dead letter, as a
// DeadLetterReader reads it.
type DeadMessage struct {
	// ID names the message in the dead letter (a stream entry id, a
	// sequence, an offset, a task id), for ReplayDead.
	ID string
	// Source is where it had been consumed: the stream, queue, subject or
	// topic, and the group or durable when there is one.
	Source string
	// Envelope is the event, or nil for a message that is not one.
	Envelope *outbox.Envelope
	// Reason is why it is dead, as the consumer recorded it.
	Reason string
	// Deliveries is how many times it had been delivered, when known.
	Deliveries int
	// DeadAt is when it went dead, when known.
	DeadAt time.Time
}
