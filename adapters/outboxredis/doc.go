// Package outboxredis delivers outbox events through Redis Streams: a
// StreamPublisher for the relay, and a Consumer that reads a stream as one
// member of a consumer group.
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
// The relay hands a whole batch to PublishBatch, which sends its XADDs in
// one pipeline and reports each entry's own result: a pipeline is not a
// transaction, and one entry can fail while the others are appended.
//
// When Redis cannot be reached (connection refused or cut, i/o timeouts, a
// closed client), cannot serve (LOADING, OOM, CLUSTERDOWN …) or does not
// answer before the relay's deadline, the error is outbox.Unavailable (the
// rule of relay.Publisher): the relay releases the batch without spending any
// event's attempts and backs off. Other errors, such as WRONGTYPE for a key
// that is not a stream, are retried as usual.
//
// # Duplicates
//
// Delivery is at least once. A relay that appended a batch and crashed
// before recording it, or whose lease expired meanwhile, has the events
// appended again by the next relay: the stream then holds the same event
// id twice. Redis 8.6 can drop such appends itself (XADD … IDMP, see
// WithIdempotentProducer; Redis 7 has no IDMP and the option falls back),
// but only within a window, so consumers dedupe by event id regardless:
// wrap handlers with Idempotent or IdempotentTx.
//
// # Consuming
//
//	store, _ := idempotency.NewStore(db)
//	h := outboxredis.IdempotentTx(store, "stats", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
//		return tx.Exec("UPDATE stats SET orders = orders + 1").Error // exactly once per event
//	})
//	c := outboxredis.NewConsumer(rdb, "shop:orders", "stats", hostname, h,
//		outboxredis.WithDeadLetterStream("shop:orders:dead"))
//	err := c.Run(ctx) // until ctx ends
//
// HandlerOf and TxHandlerOf adapt a function of the decoded payload:
//
//	h := outboxredis.IdempotentTx(store, "stats", outboxredis.TxHandlerOf(
//		func(ctx context.Context, tx *gorm.DB, o Order) error { … }))
//
// A payload that does not decode into the type is a permanent failure
// (ErrBadPayload): the message is dead at once.
//
// Run creates the group if it is missing (XGROUP CREATE … MKSTREAM, from
// the start of the stream unless WithStartID says "$"), then loops:
//
//   - It reads new messages with XREADGROUP (WithCount at a time, waiting
//     up to WithBlock), and handles them one at a time.
//   - Each message's envelope is decoded, the W3C trace context of its
//     traceparent and tracestate is restored, and the handler runs under a
//     consumer span (WithTracerProvider, default otel.GetTracerProvider())
//     with the Delivery in its context (DeliveryFrom).
//   - Success: XACK. Failure: the message stays pending, and this consumer
//     delivers it again after WithRetryDelay (XPENDING … IDLE, then XCLAIM
//     of that one message just before its handler runs).
//   - Messages of any consumer of the group pending longer than WithMinIdle
//     (a consumer that died, or a restart under another name) are adopted
//     with XAUTOCLAIM … JUSTID, which counts no delivery, and retried here
//     like this consumer's own.
//   - A message is dead, that is acknowledged, logged at error level,
//     appended to the WithDeadLetterStream stream and passed to WithOnDead,
//     when its handler returns outbox.Permanent, when it is not an outbox
//     event (ErrMalformed: it can never succeed), or when its handler ran
//     WithMaxDeliveries times without success (ErrTooManyDeliveries).
//
// # What counts towards WithMaxDeliveries
//
// Handler runs that fail count, and so does a delivery cut short by a
// crash of the consumer. Runs that end in outbox.Unavailable (the
// handler's own dependency is down) or idempotency.ErrInProgress (the
// event is being handled elsewhere) do not, nor do deliveries that never
// reached the handler: the rest of a batch after a handler reported its
// transport unavailable or Run's context ended, and messages waiting for
// their predecessor (WithKeyOrder). Redis counts every delivery; the
// consumer keeps the ones that do not count in a hash of the group in
// Redis (ExcusedKey), so that they stay excused when the consumer
// restarts or another one claims the message, and removes an entry from
// it when its message is acknowledged or dead. Delivery.Attempt is the
// counted run, Delivery.Deliveries Redis's count.
//
// When a handler returns outbox.Unavailable, the consumer pauses (1s
// doubling to 30s) before going on. Redis errors are logged and retried;
// Run returns only when its context ends, after finishing the message in
// hand (within WithBlock when idle), or for an invalid configuration.
// Messages read but not started by then stay pending: the consumer retries
// them when it runs again under the same name, and the others of its group
// adopt them after the min idle time.
//
// Each consumer handles one message at a time; run more consumers, each
// under its own stable name, to share a stream. While a consumer holds
// messages (those of a read, or of its own pending list taken for a retry
// or after an adoption, waiting behind the one being handled, and that
// one while its handler runs) it resets their idle time every third of
// the min idle time, each only if it is still its own (XPENDING, then
// XCLAIM … JUSTID, in one script), so that another consumer's XAUTOCLAIM
// does not adopt them: no message is handled by two consumers at once,
// whatever WithCount and the handler's time within its timeout
// (WithHandlerTimeout, the min idle time unless set). A consumer that
// crashes or is frozen stops doing so, and the others adopt its messages
// after the min idle time; one that was frozen that long checks, before it
// runs or acknowledges a message it held, that the message is still its
// own, and leaves it to the consumer that adopted it otherwise. A retry
// claims a message again (XCLAIM) only while it is still the consumer's
// own, in one script: XCLAIM alone would take it from a consumer that
// adopted it and runs it.
//
// # Dead here is not dead in the outbox
//
// The relay's work ends when the entry is in the stream: the outbox event
// is then published, whatever its consumers do. A message that a consumer
// declares dead (outbox.Permanent, too many deliveries) is dead in that
// consumer group only: the outbox row stays published, the relay's dead
// letters (`outbox dead list`, relay.Inspector.ListDead) do not show it, and replay
// is the dead-letter stream's business (WithDeadLetterStream, WithOnDead).
// Likewise outbox.Envelope.Attempt counts the relay's attempts to append
// the event (1 unless the append failed), not the consumer's: use
// DeliveryFrom for those (Delivery.Attempt, Delivery.LastAttempt).
//
// # Key order
//
// The relay appends the events of one PartitionKey one at a time in their
// commit order, and a stream keeps the order of its entries, but that
// order ends at the consumers: a failed message is retried after later
// ones of its key, and several consumers handle a key's messages at once.
// For events of one key handled one at a time, in order, publish WithKeyChain
// and consume WithKeyOrder (every consumer of the group):
//
//	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithKeyChain())
//	c := outboxredis.NewConsumer(rdb, "orders", "billing", hostname, h,
//		outboxredis.WithKeyOrder(), outboxredis.WithRetryDelay(time.Second))
//
// Each keyed entry then names the entry before it of its key in the same
// stream (FieldAfter), and a consumer hands an entry to its handler only
// when that predecessor is no longer pending in the group: handled, or
// dead. Keys are independent: the messages of other keys go on, on any
// consumer. The order is per stream: events of one key written to two
// streams are two chains.
//
// The trade-offs: a key whose message fails waits for its retries
// (WithRetryDelay, WithMaxDeliveries) and goes on after it succeeds or is
// dead, so a dead message is skipped, not waited for; a consumer that dies
// holding a message holds up its key until another adopts it
// (WithMinIdle); each keyed message costs an XPENDING, and a waiting one a
// check every 100ms; replaying a dead message from the dead-letter stream
// runs it after its successors. Keys with many events are handled no
// faster than one consumer can handle them one after another.
//
// # Redis Cluster, replicas and failover
//
// The publisher and the consumer take any redis.UniversalClient, a
// *redis.ClusterClient included: a stream lives in one slot, and the keys
// kept beside it (ChainKey, ExcusedKey) are named with the stream's hash
// tag so that they share its slot (name streams "{orders}" or "orders";
// tests/redis_cluster_test.go runs both adapters through a cluster of
// three masters and three replicas).
//
// Redis replicates asynchronously: a master acknowledges an append before
// any replica has it. If the master is then lost with its machine, or cut
// off from its replicas (a partition) and failed over, what it had
// acknowledged and not yet replicated is lost for good: the relay recorded
// those events published, and no consumer will see them (a master process
// killed on a healthy machine lost nothing in the tests: the kernel still
// sent what it had written; a partition of 1.5s before the kill lost every
// event acknowledged meanwhile, 440 to 720 per run). WithWaitReplicas
// closes the gap: the publisher reports an event published only once a
// replica of its master acknowledged it (WAIT), and otherwise
// outbox.Unavailable, so that the relay appends it again after the
// failover (0 lost in the same test, a few events delivered twice:
// consumers dedupe by event id). It costs a round trip and the replica's
// delay per master and batch, and while a master has no live replica
// (after its failover, until a replacement replica has synced) nothing is
// published to it. Redis's min-replicas-to-write is the server-side
// counterpart: it refuses writes while replicas lag, but cannot tell that
// an acknowledged write was replicated.
//
// # Exactly-once effects
//
// Idempotent records each handler's success under "<event id>:<handler
// name>" in an idempotency.Store: duplicates and redeliveries of an event
// skip a handler that already succeeded. IdempotentTx runs the handler in
// a database transaction together with its record, so that its writes to
// that database happen exactly once.
package outboxredis
