// Package outboxasynq carries outbox events over asynq
// (github.com/hibiken/asynq): a Publisher that the relay uses to enqueue
// one task per event, and, on the consumer side, Handler, which runs a
// handler written against package consume (the same handlers run on every
// broker) as an asynq.Handler, in asynq's own ServeMux and servers. It is a
// module of its own: github.com/gormoutbox/outbox/adapters/outboxasynq.
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
// enqueue a second task: handlers deduplicate with consume.Idempotent or
// consume.IdempotentTx, whose records last a week by default.
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
//	mux.Handle("order.created", outboxasynq.Handler(consume.IdempotentTx(store, "stats",
//		func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
//			return tx.Exec("UPDATE stats SET orders = orders + 1").Error // exactly once per event
//		}), consume.WithMaxDeliveries(5)))
//	srv := asynq.NewServer(redisOpt, asynq.Config{Queues: map[string]int{"orders": 1},
//		IsFailure: outboxasynq.IsFailure, RetryDelayFunc: outboxasynq.RetryDelay(nil)})
//	err = srv.Run(mux)
//
// Handler runs each task with the policy of package consume, the same as
// every broker's consumer: it decodes the envelope (a task that does not
// carry one is archived, consume.ErrMalformed), checks it with
// consume.WithRegistry, runs the handler under a consumer span continuing
// the event's trace (the relay's delivery span, or the span that emitted
// the event) with the handler timeout, recovers a panic, counts metrics
// and logs, and turns the handler's error into what asynq does with the
// task: archived (asynq.SkipRetry) when dead, retried after the consumer's
// delay otherwise, counted or not. Configure the server with IsFailure and
// RetryDelay, or every retry counts and waits asynq's own delay.
// consume.DeliveryFrom gives the run's Delivery, its Details a Task (id,
// queue, asynq's retry count and MaxRetry). See Handler for the details,
// and for how asynq's MaxRetry and consume.WithMaxDeliveries combine.
//
// asynq v0.26 loses the completion of a task that finished while Redis
// was unreachable (its retry of the write runs under a context already
// ended): the task stays active until its lease expires and the server's
// recoverer retries it, up to about two minutes, and runs it again (an
// idempotent handler skips it). Under KeyOrder its key waits meanwhile.
//
// # Archived here is not dead in the outbox
//
// The relay's work ends when the task is in asynq: the outbox event is
// then published, whatever the handlers do. A dead task (outbox.Permanent,
// or its last counted run failed) is archived by asynq: the outbox row
// stays published, the relay's dead letters (`outbox dead list`,
// relay.Inspector.ListDead) do not show it. NewDeadLetters reads a queue's
// archive and runs its tasks again (a consume.DeadLetterReader and
// DeadLetterReplayer, for the admin page and the CLI), as asynq's own tools
// do (asynq.Inspector, the asynq CLI, asynqmon). Likewise
// outbox.Envelope.Attempt counts the relay's attempts to enqueue the
// event (1 unless the enqueue failed); a handler reads the consumer's with
// consume.DeliveryFrom (Delivery.Attempt, MaxAttempts, LastAttempt).
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
//	mux.Handle("order.created", outboxasynq.Handler(h))
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
