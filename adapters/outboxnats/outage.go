package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// lookupTimeout bounds the question "which stream captures this subject?"
// asked after a message got no answer.
const lookupTimeout = 5 * time.Second

// failed names the event and subject in err, an error of NATS or
// JetStream, and classifies it: outbox.Permanent for a message that can
// never be stored, outbox.Unavailable when NATS or JetStream is down (the
// rule of relay.Publisher, adapterkit.Outage), and as it is otherwise.
func (p *Publisher) failed(ctx context.Context, e *outbox.Envelope, subject string, err error) error {
	wrapped := fmt.Errorf("outboxnats: publishing event %s (%s) to %s: %w", e.ID, e.Type, subject, err)
	switch {
	case errors.Is(err, ErrNoStream):
		return wrapped
	case tooLarge(err):
		return outbox.Permanent(fmt.Errorf("%w: %w", ErrInvalidMessage, wrapped))
	case adapterkit.Outage(ctx, err, natsDown):
		return outbox.Unavailable(wrapped)
	}
	return wrapped
}

// lookup tells why no stream answered a message to subject: ErrNoStream
// when JetStream says that no stream captures it, and an error marked
// outbox.Unavailable when a stream does (it is not serving: restarting,
// electing a leader) or when JetStream itself does not answer.
func (p *Publisher) lookup(ctx context.Context, subject string) error {
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	name, err := p.js.StreamNameBySubject(lctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w %q", ErrNoStream, subject)
	case err == nil:
		return outbox.Unavailable(fmt.Errorf("stream %s captures %s but did not answer", name, subject))
	}
	return outbox.Unavailable(fmt.Errorf("JetStream did not say which stream captures %s: %w", subject, err))
}

// tooLarge reports whether err says that the message is larger than the
// server (max_payload) or the stream (MaxMsgSize) accepts.
func tooLarge(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) ||
		(errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum)
}

// natsDownErrors are the errors of a NATS connection, or a JetStream publisher,
// that cannot send or did not hear back: none says anything of the
// message.
var natsDownErrors = []error{
	nats.ErrConnectionClosed, jetstream.ErrConnectionClosed,
	nats.ErrDisconnected,
	nats.ErrConnectionReconnecting,
	nats.ErrConnectionDraining, nats.ErrDrainTimeout,
	nats.ErrReconnectBufExceeded,
	nats.ErrStaleConnection,
	nats.ErrNoServers,
	nats.ErrInvalidConnection,
	nats.ErrTimeout,
	jetstream.ErrAsyncPublishTimeout,
	jetstream.ErrTooManyStalledMsgs,
	jetstream.ErrJetStreamPublisherClosed,
	jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount,
	jetstream.ErrServerShutdown,
}

// natsDown reports whether err is NATS's or JetStream's own way of saying
// that it cannot take a message now; adapterkit.Outage adds the end of
// the context (no acknowledgement in time) and transport failures.
//
// Observed with nats.go v1.55 against nats-server 2.9: a server that goes
// away fails the acknowledgements in flight with nats.ErrDisconnected (the
// client resets them when it starts reconnecting); a closed connection
// refuses publishes with nats.ErrConnectionClosed; a message buffered while
// reconnecting is acknowledged only after the reconnect, so its wait ends
// in the ack timeout; a stream that is full under DiscardNew answers 503
// (err_code 10077), as does a server short of resources.
func natsDown(err error) bool {
	for _, o := range natsDownErrors {
		if errors.Is(err, o) {
			return true
		}
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 503
}

// headerOK reports whether an event header may be copied to the message's
// NATS headers. Names reserved by NATS ("Nats-…"), the Publisher's own
// headers and the envelope's "content-type" (the payload's, not the
// message's) are left out, as is any name or value that would not survive
// the NATS header format; all of them stay in the envelope's JSON.
func headerOK(name, value string) bool {
	if name == "" || strings.ContainsAny(name, ": \t\r\n") || !headerValueOK(name) || !headerValueOK(value) {
		return false
	}
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(lower, "nats-"),
		lower == strings.ToLower(HeaderContentType),
		lower == strings.ToLower(HeaderEventType),
		lower == strings.ToLower(HeaderPartitionKey):
		return false
	}
	return true
}

// headerValueOK reports whether v may be a NATS header value: no line
// break or other control character.
func headerValueOK(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
}
