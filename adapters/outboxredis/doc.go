// Package outboxredis delivers outbox events through Redis Streams: a
// StreamPublisher for the relay, and a consumer that reads a stream as one
// member of a consumer group and runs handlers written against package
// consume (the same handlers run on every broker). It is a module of its
// own: github.com/gormoutbox/outbox/adapters/outboxredis.
//
// # Publishing
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	r, err := relay.New(db, outboxredis.NewStreamPublisher(rdb,
//		outboxredis.WithStreamPrefix("shop:"), // "shop:orders" for Topic "orders"
//		outboxredis.WithMaxLen(1_000_000),     // XADD MAXLEN ~ 1000000
//	))
//	err = r.Start(ctx)
//
// Each event becomes one stream entry whose field "event" holds the
// envelope's CloudEvents 1.0 JSON (decode it with outbox.DecodeEnvelope),
// next to "id" and "type" for consumers that filter without decoding. The
// stream is the event's Topic, or what WithStreamFunc chooses, or
// WithDefaultStream ("outbox") for events without one, after the prefix.
// PublishBatch sends a batch's XADDs in one pipeline and reports each
// entry's own result: a pipeline is not a transaction.
//
// When Redis cannot be reached (connection refused or cut, i/o timeouts, a
// closed client), cannot serve (LOADING, OOM, CLUSTERDOWN …) or does not
// answer before the relay's deadline, the error is outbox.Unavailable: the
// relay releases the batch without spending any event's attempts. Other
// errors, such as WRONGTYPE, are retried as usual.
//
// Delivery is at least once: a relay that appended a batch and crashed
// before recording it has the events appended again. Redis 8.6 can drop
// such appends itself (WithIdempotentProducer; older servers fall back),
// but only within a window, so handlers dedupe by event id regardless
// (consume.Idempotent, consume.IdempotentTx).
//
// # Consuming
//
//	store, _ := idempotency.NewStore(db)
//	h := consume.IdempotentTx(store, "stats", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
//		return tx.Exec("UPDATE stats SET orders = orders + 1").Error // exactly once per event
//	})
//	c, err := outboxredis.NewConsumer(rdb, "shop:orders", "stats", hostname, h,
//		outboxredis.WithDeadLetterStream("shop:orders:dead"), consume.WithMaxDeliveries(5))
//	err = c.Run(ctx) // until ctx ends
//
// NewConsumer returns a consume.Consumer: what a handler's error means
// (Permanent dead at once, Unavailable and Snooze not counted, others
// retried with a doubling delay up to consume.WithMaxDeliveries), handler
// timeouts, concurrency across partition keys, spans, metrics and logs are
// consume's, the same on every broker. consume.DeliveryFrom gives the run's
// Delivery, whose Details is an Entry (stream, group, consumer, entry id,
// Redis's delivery count). What this package adds is how Redis holds the
// messages:
//
//   - Run creates the group if it is missing (XGROUP CREATE … MKSTREAM,
//     from the start of the stream unless WithStartID says "$"), and again
//     if it disappears, and reads new entries with XREADGROUP (WithCount at
//     a time, waiting up to WithBlock).
//   - A message handed back (a failed run, an uncounted one, or one that
//     waited) stays pending, held by this consumer, and is due again after
//     its own delay: the retry delay for a failure (doubling), the snooze of
//     outbox.Snooze (in key order, one waiting for its predecessor is looked
//     at again with the others, see WithKeyOrder). Due entries are taken
//     lowest id first. The due time is kept in memory: after a restart under
//     the same name, the consumer finds its pending messages with XPENDING
//     and retries them once idle for the retry delay (consume.WithRetryDelay).
//     A due message is claimed again (XCLAIM, which counts a delivery) only
//     when its handler is about to run, and only if it is still this
//     consumer's (one script: XCLAIM alone would take it from a consumer
//     that adopted it and runs it).
//   - Messages of any consumer of the group pending longer than WithMinIdle
//     (a consumer that died, or a restart under another name) are adopted
//     with XAUTOCLAIM … JUSTID, which counts no delivery, and handled here.
//   - A message is dead when its handler returns outbox.Permanent, when it
//     is not an outbox event (consume.ErrMalformed), or when it failed its
//     last counted run (consume.ErrTooManyDeliveries): it is appended to the
//     WithDeadLetterStream stream, if any, acknowledged, and passed to
//     consume.WithOnDead. NewDeadLetters reads that stream a page at a time
//     and replays its messages (a consume.DeadLetterReader and
//     DeadLetterReplayer, for the admin page and the CLI).
//
// # What counts towards consume.WithMaxDeliveries
//
// Redis counts every delivery; runs that end in outbox.Unavailable,
// outbox.Snooze or idempotency.ErrInProgress do not count, nor do
// deliveries that never reached the handler (the rest of a batch after a
// handler reported its dependency unavailable, or when Run's context
// ended, and messages waiting for their key's predecessor). The consumer
// keeps the ones that do not count in a hash of the group in Redis
// (ExcusedKey), so that they stay excused when it restarts or another
// consumer adopts the message: Delivery.Attempt is Redis's count less the
// excused ones, and a dependency that is down, however long and across
// restarts, kills no message. A delivery cut short by a crash counts.
//
// # No message handled by two consumers at once
//
// While a consumer holds messages (those of a batch waiting behind the ones
// being handled, those running, and those handed back until they are due)
// it resets their idle time every third of the min idle time, each only if
// it is still its own (XPENDING, then XCLAIM … JUSTID, in one script), so
// that another consumer's XAUTOCLAIM does not adopt them, whatever
// WithCount and the handler's time within its timeout (the min idle time
// unless consume.WithHandlerTimeout says otherwise). A consumer that
// crashes or is frozen stops doing so, and the others adopt its messages
// after the min idle time; one that was frozen that long checks, before it
// runs, acknowledges or hands back a message it held, that the message is
// still its own, and leaves it to the consumer that adopted it otherwise.
//
// # Dead here is not dead in the outbox
//
// The relay's work ends when the entry is in the stream: the outbox event
// is then published, whatever its consumers do. A message that a consumer
// declares dead is dead in that consumer group only: the outbox row stays
// published, and replay is the dead-letter stream's business
// (NewDeadLetters). Likewise outbox.Envelope.Attempt counts the relay's
// attempts to append the event; consume.Delivery.Attempt the consumer's.
//
// # Key order
//
// The relay appends the events of one PartitionKey one at a time in their
// commit order, and a consumer runs a key's messages of one batch one after
// the other, but a failed message is retried after later ones of its key,
// and several consumers handle a key's messages at once. For events of one
// key handled one at a time, in order, across every consumer of the group,
// publish WithKeyChain and consume WithKeyOrder:
//
//	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithKeyChain())
//	c, err := outboxredis.NewConsumer(rdb, "orders", "billing", hostname, h, outboxredis.WithKeyOrder())
//
// Each keyed entry then names the entry before it of its key in the same
// stream (FieldAfter), and a consumer runs an entry only when that
// predecessor is no longer pending in the group: handled, or dead (a dead
// message is skipped, not waited for). Keys are independent. The costs: a
// key whose message fails waits for its retries; a consumer that dies
// holding a message holds up its key until another adopts it (WithMinIdle);
// each keyed message costs an XPENDING, and a waiting one a check every
// 100ms; replaying a dead message runs it after its successors.
//
// # Redis Cluster, replicas and failover
//
// The publisher and the consumer take any redis.UniversalClient, a
// *redis.ClusterClient included: a stream lives in one slot, and the keys
// kept beside it (ChainKey, ExcusedKey) are named with the stream's hash
// tag so that they share its slot (name streams "{orders}" or "orders").
//
// Redis replicates asynchronously: what a master acknowledged and lost
// before any replica had it (its machine lost, or a partition followed by
// a failover) is lost for good, though the relay recorded it published (a
// partition of 1.5s before the kill lost 440 to 720 events a run in
// tests/redis_cluster_test.go). WithWaitReplicas closes the gap: the
// publisher reports an event published only once a replica of its master
// has it (WAIT), and otherwise outbox.Unavailable, so that the relay
// appends it again after the failover (0 lost in the same test, a few
// events delivered twice). It costs a round trip and the replica's delay
// per master and batch, and nothing is published to a master without a
// live replica.
package outboxredis
