package adapterkit

import (
	"log/slog"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/optionerr"
)

// PublisherConfig is the part of a broker publisher's configuration that
// every publisher has: the CloudEvents source of the events that have
// none, the logger, and the errors of its options. Embed it in the
// publisher's configuration; its WithSource and WithLogger call
// SetSource and SetLogger, so that the two options mean and check the
// same on every broker.
type PublisherConfig struct {
	// Source is the CloudEvents source of events whose envelope has none
	// (default outbox.DefaultSource).
	Source string
	// Logger is the publisher's logger (default slog.Default()).
	Logger *slog.Logger
	optionerr.Errors
}

// NewPublisherConfig returns the defaults, with errors that wrap sentinel
// (the adapter's ErrInvalidOption).
func NewPublisherConfig(sentinel error) PublisherConfig {
	return PublisherConfig{Source: outbox.DefaultSource, Logger: slog.Default(),
		Errors: optionerr.Errors{Sentinel: sentinel}}
}

// SetSource is a publisher's WithSource: source must not be empty.
func (c *PublisherConfig) SetSource(source string) {
	if source == "" {
		c.Fail("empty source")
	}
	c.Source = source
}

// SetLogger is a publisher's WithLogger: l must not be nil.
func (c *PublisherConfig) SetLogger(l *slog.Logger) {
	if l == nil {
		c.Fail("nil logger")
	}
	c.Logger = l
}
