package outboxamqp

import (
	"errors"
)

// Sentinel errors. Every error of these kinds that the package returns
// wraps one of them: test with errors.Is.
var (
	// ErrInvalidOption is wrapped by every configuration error that
	// NewPublisher and Publisher.Validate report (and so relay.New).
	// NewConsumer's errors wrap consume.ErrInvalidOption.
	ErrInvalidOption = errors.New("outboxamqp: invalid option")

	// ErrInvalidMessage is wrapped, marked outbox.Permanent, when an event
	// cannot become an AMQP message: no id, or a name (exchange, routing
	// key, header key, type, id) longer than AMQP's 255 bytes.
	ErrInvalidMessage = errors.New("outboxamqp: invalid message")

	// ErrUnroutable is wrapped by the error of an event that the broker
	// returned (basic.return) because no queue is bound to take it from
	// its exchange with its routing key: the broker dropped the message.
	// The error is ordinary (neither outbox.Permanent nor
	// outbox.Unavailable): the relay retries the event with backoff and
	// marks it dead after its attempts, with the exchange, routing key and
	// the broker's reply in the reason.
	ErrUnroutable = errors.New("outboxamqp: message unroutable")

	// ErrRefused is wrapped by the error of an event whose publish made
	// the broker close the channel (a channel exception such as
	// NOT_FOUND for an exchange that does not exist, or ACCESS_REFUSED):
	// the error also wraps the broker's *amqp091.Error. It is ordinary: the
	// relay retries the event with backoff and marks it dead after its
	// attempts. The other events of the batch are published again on a
	// fresh channel.
	ErrRefused = errors.New("outboxamqp: message refused by the broker")

	// ErrNacked is wrapped, marked outbox.Unavailable, by the error of an
	// event the broker negatively confirmed (basic.nack): it could not
	// take responsibility for the message, as when a queue with
	// x-overflow=reject-publish is full or a queue is unavailable.
	ErrNacked = errors.New("outboxamqp: message nacked by the broker")

	// ErrConfirmTimeout is wrapped, marked outbox.Unavailable, by the
	// error of an event the broker did not confirm within the confirm
	// timeout (WithConfirmTimeout) or before the relay's deadline.
	ErrConfirmTimeout = errors.New("outboxamqp: no publisher confirm in time")

	// ErrConnectionClosed is wrapped, marked outbox.Unavailable, when the
	// connection or channel closed under a publish or a consumer, or could
	// not be opened or dialled.
	ErrConnectionClosed = errors.New("outboxamqp: connection closed")

	// ErrClosed is returned by a Publisher after Close.
	ErrClosed = errors.New("outboxamqp: publisher closed")
)
