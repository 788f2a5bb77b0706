// Package relay delivers committed outbox events, at least once, through a
// Publisher: asynq (adapters/outboxasynq), Redis Streams
// (adapters/outboxredis), in-process handlers (adapters/inproc), or your
// own.
//
//	r, err := relay.New(db, publisher,
//		relay.WithConcurrency(20),
//		relay.WithOnDead(func(ctx context.Context, e *outbox.Envelope, reason error) { alert(e, reason) }),
//	)
//	if err != nil { ... }                  // a bad option, named
//	err = r.Start(ctx)                      // until ctx ends; then it drains and returns nil
//
// Run as many relays as you like, in as many processes, on PostgreSQL and
// MySQL/MariaDB; on SQLite run one.
//
// # The cycle
//
// A relay claims a batch in one short statement (PostgreSQL: an UPDATE
// whose CTEs lock with FOR UPDATE SKIP LOCKED; SQLite: UPDATE … RETURNING)
// or transaction (MySQL: a few SELECT … FOR UPDATE SKIP LOCKED and an
// UPDATE, READ COMMITTED).
// A claim sets status publishing, locked_by (the worker id), locked_until
// (now plus the lease, by the database clock) and bumps claim_version and
// attempts. The claim commits before any delivery starts: no transaction
// is open while the relay talks to the network.
//
// It then delivers the batch (WithConcurrency deliveries at once, the
// events of a partition key one after the other; or, for a BatchPublisher,
// PublishBatch calls holding at most one event per key) and records every
// outcome in one conditional UPDATE (one per 1000 events, within every
// database's limit of bind parameters) that applies to a row only if it is
// still publishing, locked by this relay, unexpired, and at the
// claim_version this relay claimed (its fencing token). A relay that was paused past its lease
// completes nothing: its outcomes are counted as lost and logged, and the
// events are delivered again by whoever claims them next. On PostgreSQL
// and MySQL, Start records a batch's outcomes while it claims and delivers
// the next one (SQLite, with its single writer, does one after the other).
//
// On PostgreSQL, a relay whose claims come back full runs ANALYZE
// (SKIP_LOCKED) on the table at most once a minute: an outbox swings from
// empty to a large backlog faster than autovacuum notices, and with the
// statistics of an empty table the planner would sort the whole backlog
// for every claim. Without the privilege it stops trying.
//
// # Outcomes
//
//   - nil: published.
//   - outbox.Permanent(err): dead at once, with the reason.
//   - outbox.Unavailable(err): the transport is down. The event, and the
//     rest of the batch not yet started, go back without spending an
//     attempt, and the relay backs off (1s doubling to 30s).
//   - outbox.Snooze(err, d): the event cannot be handled yet (for example
//     an idempotency key another delivery holds: adapters/inproc snoozes
//     on idempotency.ErrInProgress). It goes back without spending an
//     attempt, claimable again after d (at most 24h), with err as its
//     last_error; the rest of the batch is delivered and the relay does
//     not back off. Later events of its PartitionKey wait for it. An event
//     snoozed on every delivery never goes dead. Unavailable takes
//     precedence over Snooze, and Snooze over Permanent.
//   - any other error, or a panic: failed, retried after WithBackoff
//     (exponential with jitter by default); dead once the event's attempts
//     (Event.MaxAttempts, or WithMaxAttempts) are spent.
//   - a relay that crashes or stalls while delivering: its lease expires
//     and the next relay rescues the event, counting the lost claim as an
//     attempt, so an event that crashes every relay goes dead after its
//     attempts with the reason "lease expired … crashed or stalled".
//   - outcomes the relay could not record (the database out of reach):
//     the completion is retried with a backoff while the lease lasts.
//     Outcomes still not recorded then are kept in memory, and once their
//     lease has expired the relay's own rescue records them (a delivered
//     event published, not "lease expired") if no other relay rescued the
//     event first (it bumps claim_version, and the late outcome is then
//     refused like any lost lease: the event is delivered again). They are
//     kept for ten leases (at least ten minutes), and lost if the relay
//     stops.
//   - an undecodable row (headers that are not a JSON object): dead.
//
// WithOnDead is called once per event that goes dead.
//
// # Order
//
// Events sharing a PartitionKey are delivered one at a time, in the order
// their transactions committed, across all relays. A key's head is its
// oldest unfinished (pending, failed or publishing) event. A claim takes a
// key only when its head is claimable (pending or failed, and due) and not
// locked by another claim, and then takes the head run: the head and the
// events of the key that follow it, up to the first that is not claimable
// (at most batch size ÷ keys found, so that keys share a batch). The relay
// delivers a run one event after the other; after an event that was not
// published, the rest of its run goes back without spending an attempt. So
// a key with an event in flight is skipped by every other claim, an event
// waiting for a retry holds back the later events of its key, and a dead
// event stops holding them. Commit order equals id order because the write
// path serialises the writers of a key (see package outbox). A replayed
// dead event is delivered when claimed, after later events of its key that
// were already delivered. Events without a key are delivered in parallel,
// roughly in order of availability.
//
// A claim walks the keys with unfinished events through the key index,
// one index probe per key, starting after the last key this relay's
// previous claim took: keys take turns however many there are, and a key
// whose head waits for a retry costs one probe, whatever its backlog. A
// backlog over few keys drains in runs, over many keys a key per slot.
//
// # Waking up
//
// While batches come back non-empty a relay claims again at once. A claim
// that finds nothing while the relay's previous batch is still being
// recorded (its keys stay publishing until then) waits for that and claims
// again. When the table is idle it polls, from 50ms doubling to WithPollInterval. On
// PostgreSQL it also LISTENs on a channel named after the table, NOTIFYed
// by a trigger when a transaction that inserted events commits, so that an
// idle relay (polling every 5s) delivers within milliseconds of a commit.
// LISTEN holds a connection for good: the relay opens one of its own from
// the dialector's DSN, outside the *gorm.DB pool (see the README on pool
// sizing).
// NOTIFY is only a hint: polling remains the fallback, and WithListen(false)
// turns it off (behind a transaction-pooling PgBouncer).
//
// # Stopping
//
// When Start's context ends, deliveries in progress run to completion
// (bounded by the lease), those not started are released without spending
// attempts, the outcomes are recorded, and Start returns nil.
//
// # Housekeeping
//
// Each relay rescues expired leases every half lease, and deletes published
// events older than WithRetention (default 24h) in batches of 1000, between
// two batches of its own. Dead
// events are kept until an operator replays (Replay, ReplayAll) or purges
// them (PurgeDead).
//
// # Inspecting and repairing
//
// An Inspector (NewInspector) reads and repairs a table: ListDead pages
// through dead events, ListEvents through any events by filter (keyset
// paging, no payloads), GetEvent reads one; GetStats counts events per
// status and measures the oldest pending event's wait; Throughput counts
// publications per minute; BlockedKeys finds keys held back by a failed
// head and SkipKeyHead unblocks one; Replay, ReplayAll and Redeliver send
// events again; PurgePublished and PurgeDead delete. The CLI and package
// admin use it.
//
// Its reads stay fast on a table holding a large published history: each
// reads the partial index of the statuses it asks for (migrations 0005
// and 0006) rather than the history. GetStats counts every status but
// published exactly and, on PostgreSQL, estimates more than 10,000
// published events from the table's statistics (Stats.PublishedEstimated);
// Throughput reads at most 500 events per minute and estimates busier
// minutes (MinuteStat.Estimated); EventQuery.Unfinished lists a partition
// key's unfinished and dead events from their indexes (its published
// events have none).
package relay
