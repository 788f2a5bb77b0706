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
// # Consuming
//
//	mux := asynq.NewServeMux()
//	mux.Use(outboxasynq.IdempotentTx(store, "stats"))
//	mux.Handle("order.created", outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
//		var o Order
//		if err := e.Unmarshal(&o); err != nil {
//			return outbox.Permanent(err) // archived, not retried
//		}
//		return outboxasynq.Tx(ctx).Exec("UPDATE stats SET orders = orders + 1").Error
//	}))
//	srv := asynq.NewServer(redisOpt, asynq.Config{Queues: map[string]int{"orders": 1}, IsFailure: outboxasynq.IsFailure})
//	err = srv.Run(mux)
//
// Handler decodes the envelope (a malformed payload is archived at once,
// asynq.SkipRetry), continues the event's trace in a consumer span
// (WithTracerProvider) whose parent is the relay's delivery span, or the
// span that emitted the event, and maps outbox.Permanent to
// asynq.SkipRetry.
//
// Idempotent skips a task whose event already succeeded for the named
// handler and records the success otherwise, under
// "<event id>:<handler name>" in an idempotency.Store; IdempotentTx
// also runs the handler in a transaction of the store's database, handed
// out by Tx, in which the record commits: writes to that database then
// happen exactly once, whatever asynq retries and the relay redelivers.
// IsFailure keeps outages and in-progress duplicates from spending a
// task's retries.
package outboxasynq
