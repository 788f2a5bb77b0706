package outboxnats

import "errors"

// Sentinel errors. Every error of these kinds that the package returns
// wraps one of them: test with errors.Is.
var (
	// ErrInvalidOption is wrapped by the configuration errors of
	// NewPublisher (and of Validate): a nil JetStream, a nil function, an
	// invalid subject prefix, a bad duration. NewConsumer's errors wrap
	// consume.ErrInvalidOption.
	ErrInvalidOption = errors.New("outboxnats: invalid option")

	// ErrInvalidSubject is wrapped, marked outbox.Permanent, by the error
	// of an event whose subject (its Topic, or what WithSubjectFunc
	// chose, after the prefix) is not a subject one can publish to: empty,
	// with an empty token, a wildcard token ("*" or ">") or white space.
	ErrInvalidSubject = errors.New("outboxnats: invalid subject")

	// ErrInvalidMessage is wrapped, marked outbox.Permanent, by the error
	// of an event that cannot become a NATS message: no id, a nil
	// envelope, or a message larger than the server or the stream
	// accepts.
	ErrInvalidMessage = errors.New("outboxnats: invalid message")

	// ErrNoStream is wrapped by the error of an event whose subject no
	// JetStream stream captures: the server answered that no stream
	// matches it. It is neither outbox.Permanent nor outbox.Unavailable:
	// the relay retries the event with backoff, spending attempts, and
	// marks it dead after its attempts; create the stream (or fix the
	// subject mapping) and replay it. See the package documentation.
	ErrNoStream = errors.New("outboxnats: no stream captures the subject")
)
