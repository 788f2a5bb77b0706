package outboxkafka

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox"
)

// NewPublisherRecord is the record p builds for e, before its size check.
func NewPublisherRecord(p *Publisher, e *outbox.Envelope) (*kgo.Record, error) { return p.build(e) }
