package relay

import "github.com/gormoutbox/outbox"

// WithSingleActive makes the relay one of at most one active relay per
// outbox table (default off: relays claim side by side, which is safe).
// Before claiming, the relay takes a database advisory lock named after
// the table (PostgreSQL pg_try_advisory_lock, per database and schema;
// MySQL and MariaDB GET_LOCK, per database) on a connection of its own
// that it holds while it runs. A relay that cannot take it is standby: it
// claims nothing (nor rescues or deletes) and tries the lock again every
// poll interval, at most every second. When the active relay stops or
// dies, its session ends, the lock frees and a standby takes over. An
// active relay whose lock connection fails stops claiming at once, within
// that interval, and tries again. On SQLite, whose single writer runs one
// relay anyway, there is no lock: the relay is always active. Heartbeats
// record the role (RelayStatus.Role, "outbox stats"). The lock's
// connection is one of db's pool for as long as the relay runs: leave room
// for it in SetMaxOpenConns. The lock is a session's: a proxy that pools
// transactions (PgBouncer in transaction mode) does not keep it. The
// option applies to Start; RunOnce claims regardless.
func WithSingleActive() Option {
	return func(c *config) { c.singleActive = true }
}

// WithAttemptLog makes the relay write an attempt log (default off): one
// record per claim of an event that ended, in the table <table>_attempts
// (migration 0007), holding the relay's worker id, the attempt, the
// claim_version, the outcome (published, retried, dead, snoozed,
// unavailable, released, or rescued when a lease expired), the delivery's
// duration, its error and, for a published event, the publisher's receipt
// (SetReceipt: where the event went, such as a Kafka partition and offset;
// migration 0010). Records are written in the statement (on
// PostgreSQL) or the transaction (MySQL, SQLite) that records the
// outcomes, a multi-row insert per batch, never a round trip per event; a
// completion refused by fencing writes no record. Retention and purges
// delete the records with their events; Inspector.Attempts, "outbox show"
// and the admin page's event detail show them. New fails with an error
// wrapping outbox.ErrNotMigrated when the table, or its receipt column,
// does not exist.
func WithAttemptLog() Option {
	return func(c *config) { c.attemptLog = true }
}

// WithRegistry makes the relay check each claimed event against r before
// publishing it: the event is upcast (outbox.Registry.Upcast) and the
// publisher receives the upcast envelope; an event that fails the check
// (its type or version unregistered in a strict registry, its payload not
// matching the registered type any more) is dead at once, without an
// attempt at publishing, with the reason in last_error, and the other
// events flow. Without this option, the registry of the db's outbox.Plugin
// is used, if it has one.
func WithRegistry(r *outbox.Registry) Option {
	return func(c *config) {
		if r == nil {
			c.Fail("registry is nil")
			return
		}
		if err := r.Err(); err != nil {
			c.Fail("registry: %w", err)
		}
		c.registry = r
	}
}
