package outboxkafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// recordRejection reports whether err is a broker rejection of a whole
// record batch that may have been caused by one of its records only.
func recordRejection(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord)
}

// classify returns the error of event e, produced to topic under ctx, that
// the producer failed with err (not nil). A rejection of a record batch
// (recordRejection) is the record's when it was alone in its partition.
func classify(ctx context.Context, e *outbox.Envelope, topic string, err error) error {
	where := fmt.Sprintf("event %s (%s) to topic %s", e.ID, e.Type, topic)
	switch {
	case errors.Is(err, kerr.MessageTooLarge):
		return outbox.Permanent(fmt.Errorf("%w: %s: %w", ErrTooLarge, where, err))
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// Retriable to kerr, but kgo reports it only after its unknown
		// topic retries (kgo.UnknownTopicRetries) are spent.
		return outbox.Permanent(fmt.Errorf("%w: %s: the topic does not exist: %w", ErrRejected, where, err))
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.InvalidTopicException):
		return outbox.Permanent(fmt.Errorf("%w: %s: %w", ErrRejected, where, err))
	case adapterkit.Outage(ctx, err, brokerDown):
		return outbox.Unavailable(fmt.Errorf("outboxkafka: %s: %w", where, err))
	}
	return fmt.Errorf("outboxkafka: %s: %w", where, err)
}

// brokerDown reports the producer's errors that mean the cluster cannot
// take records now: retriable broker errors (no leader, not enough
// replicas, a request timed out, …) once kgo's own retries are spent,
// records that timed out, a full buffer, a closed client, and refused
// credentials.
func brokerDown(err error) bool {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrMaxBuffered), errors.Is(err, kgo.ErrClientClosed), errors.Is(err, kgo.ErrAborting),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.SaslAuthenticationFailed):
		return true
	case errors.As(err, &ke):
		return ke.Retriable
	}
	return false
}
