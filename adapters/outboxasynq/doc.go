// Package outboxasynq carries outbox events over asynq
// (github.com/hibiken/asynq): a Publisher that the relay uses to enqueue
// one task per event, and, on the consumer side, a Handler that turns a
// task back into its outbox.Envelope and middlewares that make handlers
// act once per event.
//
// # Producing
//
// The relay claims committed events and hands them to the Publisher:
//
//	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "localhost:6379"})
//	pub := outboxasynq.NewPublisher(client,
//		outboxasynq.WithQueue(func(e *outbox.Envelope) string { return "orders" }),
//		outboxasynq.WithMaxRetry(10),
//	)
//	r, err := relay.New(db, pub) // refuses a misconfigured publisher (Validate)
//	err = r.Start(ctx)
//
// Each event becomes one task: its type is the event type, its payload the
// envelope as CloudEvents 1.0 JSON, its headers the event's headers
// (traceparent, tracestate, …), its queue the event's Topic (asynq's
// "default" when empty) and its TaskID the event id. Options map the task
// type and queue, and set MaxRetry, Timeout, Retention and any other asynq
// option.
//
// # Delivered once per event, within the retention
//
// The relay delivers at least once: after a crash, a lost lease or an
// ambiguous Redis failure it enqueues an event again. Because the TaskID
// is the event id, asynq refuses the second task (asynq.ErrTaskIDConflict)
// and Publish counts that as delivered. asynq enforces a TaskID only while
// the task exists in Redis, which is why tasks are retained after success
// for DefaultRetention (24h; WithRetention). After that, a redelivery would
// enqueue a second task: consumers deduplicate with Idempotent or
// IdempotentTx, whose records last a week by default.
//
// # Redis outages
//
// When Redis cannot be reached (connection refused or reset, closed
// connections, timeouts, a server loading, read-only or out of memory),
// Publish returns outbox.Unavailable(err): the relay hands the batch back
// without spending any attempt and backs off, so that an outage, however
// long, kills no event. asynq v0.26 reports most of these only as text
// ("UNKNOWN: redis eval error: EOF"); the Publisher recognises both the
// typed and the textual forms. Other enqueue errors are ordinary: the
// relay retries them with backoff, and marks the event dead after its
// attempts.
//
// With a Redis Cluster (asynq.RedisClusterClientOpt for the client and
// the servers) each queue lives in one slot. Redis replicates
// asynchronously: a master that is lost with tasks it acknowledged but
// had not replicated (its machine lost, or cut off from its replicas
// before a failover) loses them, though the relay recorded the events
// published: in tests/redis_cluster_test.go a partition of 1.5s before the
// kill lost every task enqueued meanwhile (440 to 720 a run). asynq's
// client has no way to wait for replicas; where that loss matters, publish
// through Redis Streams with outboxredis.WithWaitReplicas, or replay the
// events of the failover's window (outbox redeliver).
//
// # Consuming
//
//	mux := asynq.NewServeMux()
//	mux.Use(outboxasynq.IdempotentTx(store, "stats"))
//	mux.Handle("order.created", outboxasynq.HandlerOf(func(ctx context.Context, o Order) error {
//		return outboxasynq.Tx(ctx).Exec("UPDATE stats SET orders = orders + 1").Error
//	}))
//	srv := asynq.NewServer(redisOpt, asynq.Config{Queues: map[string]int{"orders": 1}, IsFailure: outboxasynq.IsFailure})
//	err = srv.Run(mux)
//
// Handler decodes the envelope (a malformed payload is archived at once,
// asynq.SkipRetry), continues the event's trace in a consumer span
// (WithTracerProvider) whose parent is the relay's delivery span, or the
// span that emitted the event, and maps outbox.Permanent to
// asynq.SkipRetry. HandlerOf does the same for a function of the payload
// decoded into a Go type; a payload that does not decode is archived
// (ErrBadPayload). The handler's context carries the envelope
// (EnvelopeFrom) and asynq's view of the task (DeliveryFrom).
//
// Idempotent skips a task whose event already succeeded for the named
// handler and records the success otherwise, under
// "<event id>:<handler name>" in an idempotency.Store; IdempotentTx
// also runs the handler in a transaction of the store's database, handed
// out by Tx, in which the record commits: writes to that database then
// happen exactly once, whatever asynq retries and the relay redelivers.
// IsFailure keeps outages and in-progress duplicates from spending a
// task's retries (but asynq archives a task on its last attempt whatever
// the error: see IsFailure).
//
// # Archived here is not dead in the outbox
//
// The relay's work ends when the task is in asynq: the outbox event is
// then published, whatever the handlers do. A handler's outbox.Permanent,
// or a task whose retries are spent, archives the asynq task: the outbox
// row stays published, the relay's dead letters (`outbox dead list`,
// relay.Inspector.ListDead) do not show it, and it is inspected and run again with
// asynq's tools (asynq.Inspector, the asynq CLI or asynqmon). Likewise
// outbox.Envelope.Attempt counts the relay's attempts to enqueue the
// event (1 unless the enqueue failed), not asynq's retries: a handler
// reads those with DeliveryFrom (Delivery.Retried, Delivery.MaxRetry,
// Delivery.LastAttempt).
//
// # Key order
//
// The relay enqueues the events of one PartitionKey one at a time in their
// commit order, but that order ends at asynq: its workers run tasks
// concurrently, and a failed task is retried after later ones. For the
// tasks of a key run one at a time, in order, publish WithKeyChain and run
// the handlers under KeyOrder:
//
//	pub := outboxasynq.NewPublisher(client, outboxasynq.WithKeyChain(rdb))
//
//	mux.Use(outboxasynq.KeyOrder(rdb, time.Second)) // first
//	mux.Use(outboxasynq.IdempotentTx(store, "stats"))
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:                outboxasynq.IsFailure,
//		RetryDelayFunc:           outboxasynq.RetryDelay(nil),
//		DelayedTaskCheckInterval: 200 * time.Millisecond,
//	})
//
// Each keyed task then names the task enqueued before it for its key,
// and KeyOrder runs a task only once that predecessor completed or was
// archived (or asynq no longer holds it); otherwise the task waits in its
// worker for a while, then is retried without counting as a failure.
// Keys are independent; tasks without a key run as usual; the chain spans
// queues (each must be served).
//
// The trade-offs: a key whose task fails waits for its retries (asynq's
// RetryDelayFunc) and goes on once it completes or is archived, so an
// archived task is skipped, not waited for, and running it again later
// runs it after its successors; a waiting task holds a worker for up to
// KeyOrder's wait, and then waits at least DelayedTaskCheckInterval; each
// keyed task costs two Redis round trips more to enqueue and one or more
// to start. asynq's own features do not give this order: Group aggregates
// tasks into one, Unique drops duplicates, and a queue per key with one
// worker still retries a failed task after the next.
package outboxasynq
