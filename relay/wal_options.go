package relay

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Defaults of WAL mode's warning thresholds (WithWALWarning).
const (
	// DefaultWALWarnLag is the slot lag, in bytes of WAL from its confirmed
	// position to the end of the WAL, past which the relay warns.
	DefaultWALWarnLag = 1 << 30
	// DefaultWALWarnAge is the age of the oldest unconfirmed commit past
	// which the relay warns.
	DefaultWALWarnAge = time.Minute
	// DefaultWALSpillAfter is how long an unavailable publisher holds the
	// stream before its events move into the table (WithWALSpillAfter).
	DefaultWALSpillAfter = 30 * time.Second
)

// WithWALSpillAfter sets how long, in WAL mode, an unavailable publisher
// (outbox.Unavailable: the broker is down) holds the stream back, its
// events waiting without spending attempts, before they move into the
// outbox table as pending (default DefaultWALSpillAfter, at least 1s).
// From then on, while the publisher stays unavailable, each batch read
// from the slot is tried once and moved into the table, where the relays
// retry it with their own backoff: the slot's confirmed position goes on,
// and a long outage makes the server keep no WAL for the slot (which
// max_slot_wal_keep_size would end by invalidating it).
func WithWALSpillAfter(d time.Duration) Option {
	return func(c *config) {
		if d < time.Second {
			c.Fail("WAL spill delay %v is less than 1s", d)
		}
		c.walSpillAfter = d
	}
}

// WithReplicationDSN sets the DSN of WAL mode's replication connection
// (default: the DSN of db's dialector). Set it when the dialector was
// given an open pool, or when the application's DSN goes through a
// connection pooler: a replication connection must reach PostgreSQL
// itself (PgBouncer does not pass the replication protocol). The relay
// adds replication=database to it.
func WithReplicationDSN(dsn string) Option {
	return func(c *config) {
		if dsn == "" {
			c.Fail("replication DSN is empty")
		}
		c.replicationDSN = dsn
	}
}

// WithWALWarning sets the thresholds past which WAL mode's relay logs a
// warning about its slot, and Inspector.GetStats (outbox stats, the admin
// page) flags it: lag bytes of WAL behind the slot's confirmed position
// (default DefaultWALWarnLag; size it well under max_slot_wal_keep_size),
// and the age of the oldest commit not yet confirmed (default
// DefaultWALWarnAge). Zero turns a threshold off.
func WithWALWarning(lagBytes int64, age time.Duration) Option {
	return func(c *config) {
		if lagBytes < 0 || age < 0 {
			c.Fail("WAL warning thresholds %d bytes, %v must not be negative", lagBytes, age)
		}
		c.walWarnLag, c.walWarnAge = lagBytes, age
	}
}

// walInstruments are WAL mode's metrics.
type walInstruments struct {
	walSpilled metric.Int64Counter
	walLagG    metric.Int64ObservableGauge
	walAgeG    metric.Float64ObservableGauge
	walLag     atomic.Int64 // the slot's lag as last read by the streamer
}

// init creates WAL mode's metrics on m.
func (w *walInstruments) init(m metric.Meter) error {
	var err error
	if w.walSpilled, err = m.Int64Counter("outbox.wal.events.spilled", metric.WithUnit("{event}"),
		metric.WithDescription("Streamed events moved into the outbox table (by status: failed, dead, pending behind their key or delayed).")); err != nil {
		return err
	}
	if w.walLagG, err = m.Int64ObservableGauge("outbox.wal.slot.lag", metric.WithUnit("By"),
		metric.WithDescription("Bytes of WAL from the slot's confirmed position to the end of the WAL: what the server keeps for the streaming relay.")); err != nil {
		return err
	}
	w.walAgeG, err = m.Float64ObservableGauge("outbox.wal.oldest_unconfirmed_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest commit the streaming relay received and has not confirmed has been committed."))
	return err
}

// walAttrs are the attributes of WAL mode's counters.
func walAttrs(table, status string) metric.AddOption {
	return metric.WithAttributes(attrTable.String(table), attrOutcome.String(status))
}

// observeWAL registers the callback that reports the streamer's gauges
// while it streams; unregister it when the relay stops.
func (in *instruments) observeWAL(s *walStreamer) (metric.Registration, error) {
	set := metric.WithAttributes(attrTable.String(s.r.table))
	return in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if !s.streaming.Load() {
			return nil
		}
		o.ObserveInt64(in.walLagG, in.walLag.Load(), set)
		o.ObserveFloat64(in.walAgeG, s.oldestAge().Seconds(), set)
		return nil
	}, in.walLagG, in.walAgeG)
}
