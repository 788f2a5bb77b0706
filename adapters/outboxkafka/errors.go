package outboxkafka

import "errors"

// Sentinel errors. Every error of these kinds that the package returns
// wraps one of them: test with errors.Is.
var (
	// ErrInvalidOption is wrapped by the configuration errors of
	// NewPublisher (and Validate): a nil client, a bad option, or a client
	// whose settings could reorder or lose a key's events.
	ErrInvalidOption = errors.New("outboxkafka: invalid option")

	// ErrNoTopic is wrapped, marked outbox.Permanent, by the error of an
	// event that has no topic (no Topic, no WithTopic, nothing from
	// WithTopicFunc; for the Debezium layout, no AggregateType) or whose
	// topic is not a valid Kafka topic name. The Publisher never asks the
	// broker to create a topic.
	ErrNoTopic = errors.New("outboxkafka: no topic")

	// ErrInvalidMessage is wrapped, marked outbox.Permanent, by the error
	// of an event that cannot become a record: a nil envelope, no id, an
	// envelope that does not encode.
	ErrInvalidMessage = errors.New("outboxkafka: invalid message")

	// ErrTooLarge is wrapped, marked outbox.Permanent, by the error of an
	// event whose record is larger than the producer sends
	// (kgo.ProducerBatchMaxBytes, kgo.MaxBufferedBytes), checked before
	// sending, or than the broker accepts alone (MESSAGE_TOO_LARGE: the
	// topic's max.message.bytes). It also wraps kerr.MessageTooLarge.
	ErrTooLarge = errors.New("outboxkafka: record too large")

	// ErrRejected is wrapped, marked outbox.Permanent, by the error of an
	// event whose record the broker refused for good: the topic does not
	// exist (once the client's unknown-topic retries are spent), the
	// client may not write to it (TOPIC_AUTHORIZATION_FAILED), its name is
	// invalid, or the record alone is invalid (INVALID_RECORD, such as a
	// record without a key on a compacted topic). It also wraps the
	// broker's *kerr.Error.
	ErrRejected = errors.New("outboxkafka: record rejected by the broker")
)
