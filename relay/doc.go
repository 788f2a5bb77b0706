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
// still publishing, locked by this relay, and at the claim_version this
// relay claimed (its fencing token: every claim and every rescue bumps
// it). A relay that was paused past its lease completes nothing once
// another relay has rescued or claimed the events: its outcomes are
// counted as lost and logged, and the events are delivered again by whoever
// claims them next. A completion that reaches the database after the
// lease but before anyone took the events over (a stalled connection, a
// lock wait) is recorded. On PostgreSQL
// and MySQL, Start records a batch's outcomes while it claims and delivers
// the next one (SQLite, with its single writer, does one after the other).
// A batch still being delivered after a quarter of its lease (a second at
// most) has the outcomes known so far recorded meanwhile, every such
// interval: one slow delivery does not hold back the others'.
//
// A claim takes 100 events while the table holds few; while claims come
// back full and their deliveries are quick it doubles, up to 1000, and it
// returns to 100 once a claim comes back short (WithBatchSize fixes the
// size). Large claims cost the database less per event during a backlog;
// small ones keep a relay's share of a short backlog small.
//
// On PostgreSQL the relay's own statements (claims, completions, rescues)
// commit with synchronous_commit off for their own transactions only: they
// wait for no disk flush. A database crash can undo the last fraction of a
// second of them, which makes those events deliverable again (at least
// once, as after a relay crash); it cannot lose an event, which its
// writer's transaction made durable. WithSynchronousCommit makes them
// wait.
//
// On PostgreSQL, a relay whose claims come back full checks every 10s
// whether the table's statistics are stale (rows changed since the last
// ANALYZE above a tenth of the table and 1000) and then runs ANALYZE
// (SKIP_LOCKED): an outbox swings from empty to a large backlog faster than
// autovacuum notices, and with the statistics of an empty table the
// planner would sort the whole backlog for every claim. Without the
// privilege it stops trying.
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
//   - a delivery that does not return by shortly before the lease ends
//     (the publisher ignores its context): the relay records the outcomes
//     it knows, releases the events it had not started without spending
//     an attempt, leaves the stuck event publishing and goes on with its
//     next batch (Result.Abandoned). The stuck event's lease expires and a
//     rescue counts the claim as an attempt; later events of its key wait
//     behind it. So an event whose delivery hangs every relay goes dead
//     after its attempts, and its neighbours spend none.
//   - a relay that crashes or is frozen while delivering: its lease
//     expires and the next relay rescues the events whose outcomes it had
//     not recorded, counting the lost claim as an attempt of each (a
//     crashed relay cannot say which it had started), so an event that
//     crashes every relay goes dead after its attempts with the reason
//     "lease expired … crashed or stalled". Rescues are counted as
//     Result.Rescued (and in the heartbeats), not as failures, and logged
//     once per rescue, each event at debug level.
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
//   - with a registry (WithRegistry, or the db's outbox.Plugin.Registry),
//     an event that fails its check (unregistered in a strict registry, a
//     payload that no longer matches its registered type): dead at once,
//     without a publish, its last_error "registry check: …". Events that
//     pass are published upcast to their latest version.
//
// WithOnDead is called once per event that goes dead.
//
// # Attempt log
//
// WithAttemptLog (off by default) records how each claim ended, one row
// per claim in <table>_attempts (migration 0007): the relay's worker id,
// the attempt, the claim_version, the outcome (AttemptPublished,
// AttemptRetried, AttemptDead, AttemptSnoozed, AttemptUnavailable,
// AttemptReleased, or AttemptRescued for a lease that expired), how long
// the delivery ran, its error, and for a published event the publisher's
// receipt, where it says the event went (SetReceipt: a Kafka topic,
// partition and offset; migration 0010 adds the column). The records are written with the
// outcomes, no round trip per event: on PostgreSQL in the completion's
// own statement (a data-modifying WITH inserting the records of the rows
// the fenced UPDATE returned), on MySQL and SQLite in the completion's
// transaction (one multi-row INSERT per batch). So fencing governs both: a
// completion refused because its lease was lost writes no record, and the
// claim's record is the rescue's. A claim is recorded once (a unique key on
// event_row_id and claim_version), even when a completion whose answer was
// lost is tried again. Retention, PurgePublished and PurgeDead delete the
// records with their events (whichever relays wrote them, when the table
// exists); Replay and Redeliver keep them, and the next claims add to
// them. Inspector.Attempts reads an event's log ("outbox show", the admin
// page's event detail). Its cost, in BenchmarkAttemptLog (one relay
// draining 5,000 events through a no-op publisher, so that the database is
// the whole cost; four runs on a heavily loaded, shared 2-core machine):
// 0.69 to 0.91 times the throughput without it on PostgreSQL, 0.49 to 0.88
// on SQLite (whose completions are not overlapped with deliveries), 0.82
// to 1.07 on MariaDB. With a real broker the share is smaller.
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
// A claim walks the keys with unfinished events through the key index, one
// index probe per key, starting after the last key this relay's previous
// claim took: keys take turns however many there are, and a key whose head
// waits for a retry costs one probe, whatever its backlog. A backlog over
// few keys drains in runs, over many keys a key per slot. Where many keys
// are each several events deep, the relay learns their depth from its
// claims and walks fewer keys per claim, taking longer runs of each (a
// probe per key costs far more than the next event of a run). 1,000 keys 8
// deep drain at about 0.87 of the rate of events without a key on SQLite,
// 0.8 on PostgreSQL and 0.8 on MariaDB (BenchmarkKeyedBacklog, medians of
// 16 iterations), against 0.55-0.66 and 0.54 when every claim walked a
// key per event. On PostgreSQL the rest is the claim's own cost: a keyed
// event's claim also writes its entry of the key index, which holds
// publishing events so that their keys wait. A claim still walks at
// least WithConcurrency keys, so that few deep keys are delivered side by
// side.
//
// # Waking up
//
// While batches come back non-empty a relay claims again at once. A claim
// that finds nothing while the relay's previous batch is still being
// recorded (its keys stay publishing until then) waits for that and claims
// again. When the table is idle it polls, from 50ms doubling to WithPollInterval. On
// PostgreSQL it also LISTENs on a channel named after the table, which the
// INSERT that writes events NOTIFYs (delivered when its transaction
// commits), so that an
// idle relay (polling every 5s) delivers within milliseconds of a commit.
// LISTEN holds a connection for good: the relay opens one of its own from
// the dialector's DSN, outside the *gorm.DB pool (see docs/databases.md on
// pool sizing).
// NOTIFY is only a hint: polling remains the fallback, and WithListen(false)
// turns it off (behind a transaction-pooling PgBouncer).
//
// # Stopping
//
// When Start's context ends, deliveries in progress run to completion
// (bounded by the lease), those not started are released without spending
// attempts, the outcomes are recorded, and Start returns nil (in WAL mode:
// ErrWALSlotLost when the slot was invalidated).
//
// # Housekeeping
//
// Each relay rescues expired leases every half lease, and deletes published
// events older than WithRetention (default 24h), with their attempt log
// records, in batches of 1000, between two batches of its own, oldest
// first, through the index of published events (migration 0006): a pass
// reads the rows it deletes, however much younger history the table
// holds. Dead
// events are kept until an operator replays (Replay, ReplayAll) or purges
// them (PurgeDead).
//
// # Inspecting and repairing
//
// An Inspector (NewInspector) reads and repairs a table: ListDead pages
// through dead events, ListEvents through any events by filter (keyset
// paging, no payloads), GetEvent reads one and Attempts its attempt log;
// GetStats counts events per
// status and measures the oldest pending event's wait; Throughput counts
// publications per minute; BlockedKeys finds keys held back by a failed
// head and SkipKeyHead unblocks one; Replay, ReplayAll and Redeliver send
// events again; PurgePublished and PurgeDead delete. The CLI and package
// admin use it. A repair an operator confirmed acts on the state the
// confirmation showed, or not at all (ErrChanged): ReplayIfUnchanged and
// RedeliverIfUnchanged take each event's EventState (status and claim
// version), SkipKeyHeadIfUnchanged the head's, ReplayAllIfUnchanged the
// DeadSet (count and digest) of DeadSetOf, and PurgePublishedBefore a
// cutoff instant (Now minus the age): a confirmation submitted twice
// changes nothing more. In WAL mode GetStats also reports the replication
// slot's health (Stats.WAL: wal_status, lag bytes, the age of the oldest
// unconfirmed commit, the streaming relay, a warning past InspectWAL's
// thresholds).
//
// # WAL mode
//
// With an outbox.Plugin in WAL mode (outbox.WAL, PostgreSQL 14 and
// later), events are logical decoding messages, not rows, and Start runs
// one more service beside the table's (wal.go): a streamer that opens a
// replication connection (the dialector's DSN with replication=database,
// or WithReplicationDSN) and streams the slot through pgoutput
// (publication_names, messages 'true'). A reader (wal_recv.go) assembles
// each committed transaction's messages, decoding them as they arrive, and
// hands whole transactions to a deliverer (wal_deliver.go), which delivers
// them in batches through the same delivery as a claimed batch
// (concurrency, a key's events one after the other, spans, metrics,
// BatchPublisher). The slot's confirmed position advances only past
// transactions whose every event is settled: published, or moved into the
// table (a spill: failed with its attempt and backoff, dead with its
// reason, pending when snoozed or delayed by AvailableAt, pending behind
// an unfinished row of its key), committed before the position is
// confirmed. A key with unfinished rows in the table (read when streaming
// starts, then from the table's inserts, which the publication streams
// in commit order) has its later events spilled behind them, and is
// checked again before its next event is delivered. An unavailable
// publisher backs the stream off, spending no attempt, for
// WithWALSpillAfter at most; then the stream's events move into the table
// as pending while the publisher stays down. The table's
// services (claims, retries, rescues, retention) go on as in table mode
// for the rows.
//
// PostgreSQL lets one connection stream a slot: a relay refused the slot
// ("replication slot … is active") stands by and retries every second.
// The streaming relay records its progress every second in the
// WALStatusTable row of its slot and checks the slot: an invalidated slot
// (wal_status lost) is logged at error level and Start returns
// ErrWALSlotLost. The gauges outbox.wal.slot.lag and
// outbox.wal.oldest_unconfirmed_age and the counter
// outbox.wal.events.spilled describe it; WithWALWarning sets when its log
// warns. Delivery is at least once: after a crash the transactions not
// confirmed are streamed again, under the same event ids.
//
// Its reads stay fast on a table holding a large published history: each
// reads the partial index of the statuses it asks for (migrations 0005
// and 0006) rather than the history. GetStats counts every status but
// published exactly and, on PostgreSQL, estimates more than 10,000
// published events from the table's statistics (Stats.PublishedEstimated);
// Throughput counts each minute's publications through the published
// index, up to 20,000 a minute (busier minutes are estimated,
// MinuteStat.Estimated), an ended minute once per Inspector;
// EventQuery.Unfinished lists a partition
// key's unfinished and dead events from their indexes (its published
// events have none).
package relay
