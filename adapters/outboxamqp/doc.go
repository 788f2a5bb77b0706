// Package outboxamqp carries outbox events over RabbitMQ (AMQP 0-9-1,
// github.com/rabbitmq/amqp091-go): a Publisher that the relay uses to
// publish one persistent message per event with publisher confirms, and
// a Consumer that hands the messages of a queue to handlers, with
// middlewares that make their effects happen once per event. It is a Go
// module of its own (github.com/gormoutbox/outbox/adapters/outboxamqp), so
// that applications that do not use RabbitMQ do not download its client.
//
// # Publishing
//
//	pub, err := outboxamqp.NewPublisher(conn, // or nil, with WithDial
//		outboxamqp.WithDial(outboxamqp.Dialer("amqp://guest:guest@localhost:5672/", amqp091.Config{})),
//		outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) { return "shop.events", e.Type }),
//	)
//	r, err := relay.New(db, pub)
//	err = r.Start(ctx)
//
// Each event becomes one message: persistent (delivery mode 2), its
// message-id the event id, its type the event type, its content type
// ContentType ("application/cloudevents+json"), its body the envelope as a
// CloudEvents 1.0 structured-mode JSON event (outbox.DecodeEnvelope reads
// it back), its headers the event's headers (traceparent, tracestate, …)
// and the Header… constants (event-type, tenant-id, …) for headers
// exchanges. By default it goes to the default exchange with the event's
// Topic as its routing key, that is, to the queue the Topic names (an
// event without a Topic uses its Type); WithExchange names one exchange
// for all, with the Topic as routing key; WithRouting chooses both per
// event. WithTopology declares exchanges and queues on each new
// connection; WithMessage adjusts the messages.
//
// The relay hands a batch to PublishBatch, which publishes every message
// on one confirm-mode channel, then waits for all the broker's confirms
// (at most WithConfirmTimeout, and never past the relay's deadline), and
// reports each event's own outcome:
//
//   - confirmed (basic.ack) and not returned: published.
//   - returned (basic.return: the messages are published mandatory, and no
//     queue was bound for the routing key, so the broker dropped it):
//     ErrUnroutable, an ordinary error. A missing binding is a deployment
//     mistake that is usually fixed soon (a consumer not yet started), so
//     the relay retries the event with backoff and marks it dead only
//     after its attempts, with the exchange, the routing key and the
//     broker's reply in the reason; `outbox dead replay` sends it again
//     once the binding exists. It is not Permanent (one deploy out of
//     order would kill events at once) nor Unavailable (a mistake would
//     stall the relay without a word).
//   - refused: the publish made the broker close the channel, as for an
//     exchange that does not exist (NOT_FOUND) or one the user may not
//     write to (ACCESS_REFUSED): ErrRefused, ordinary too, for the events
//     of that exchange; the rest of the batch is published again on a new
//     channel (one at a time when the broker's reason names no exchange,
//     so that only the culprit fails).
//   - nacked (basic.nack: a full queue with x-overflow=reject-publish, a
//     queue without a leader): ErrNacked, marked outbox.Unavailable.
//   - not confirmed in time, or the channel or connection closed first,
//     or a connection that cannot be opened: ErrConfirmTimeout or
//     ErrConnectionClosed, marked outbox.Unavailable.
//   - an event that cannot be a message (no id, a name over AMQP's 255
//     bytes): ErrInvalidMessage, marked outbox.Permanent.
//
// For outbox.Unavailable the relay spends no attempt: it releases the
// batch and backs off, so an outage, however long, kills no event.
//
// # Reconnecting
//
// The Publisher and the Consumer take a *amqp091.Connection, which amqp091
// does not reopen once it closed (a network failure, a broker restart).
// Give WithDial, and they dial a new connection themselves (see Dialer):
// the Publisher on its next publish after the connection closed (until
// then, and while the broker is down, every publish is Unavailable), the
// Consumer before it consumes again (after a backoff of 100ms doubling to
// 5s). The connection you pass in is never closed by this package; the
// ones it dialled are closed by Publisher.Close and when Consumer.Run
// returns. Without WithDial, a closed connection makes every publish
// Unavailable, and the Consumer waits, until the connection is open
// again, which happens only if it was dialled with amqp091's experimental
// Config.Recovery (not what this package is tested with): the events wait
// in the outbox, nothing is lost, but nothing moves until the process
// restarts. Calls that amqp091 makes without a context (opening a
// channel, declaring the topology) are abandoned at the relay's deadline,
// so a broker that hangs holds the relay no longer than its lease.
//
// A connection that the broker blocks (a memory or disk alarm) takes
// messages without confirming them: they fail with ErrConfirmTimeout,
// Unavailable, and are published again later.
//
// # Duplicates
//
// Delivery is at least once. A message whose confirm was lost (the
// connection cut after the broker took it, a relay killed after it
// published but before it recorded the batch, a lease expired) is
// published again: the queue then holds the event twice, under the same
// message-id. RabbitMQ does not deduplicate: consumers do, by event id
// (Idempotent, IdempotentTx).
//
// # Consuming
//
//	store, _ := idempotency.NewStore(db)
//	h := outboxamqp.IdempotentTx(store, "stats", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
//		return tx.Exec("UPDATE stats SET orders = orders + 1").Error // exactly once per event
//	})
//	c, err := outboxamqp.NewConsumer(conn, "order-stats", h, outboxamqp.WithDial(dial), outboxamqp.WithConcurrency(4))
//	err = c.Run(ctx) // until ctx ends
//
// HandlerOf and TxHandlerOf adapt a function of the decoded payload; a
// payload that does not decode into the type is a permanent failure
// (ErrBadPayload).
//
// Run opens a channel, sets the prefetch (WithPrefetch), consumes the
// queue with manual acknowledgements and hands each message to one of
// WithConcurrency workers. The envelope is decoded, the W3C trace context
// of its traceparent is restored, and the handler runs under a consumer
// span (WithTracerProvider) with the Delivery in its context
// (DeliveryFrom), for at most WithHandlerTimeout. Then:
//
//   - success: the message is acknowledged (basic.ack).
//   - outbox.Permanent, a message that is not an outbox event
//     (ErrMalformed), or the WithMaxDeliveries-th failure
//     (ErrTooManyDeliveries): the message is dead. It is rejected without
//     requeue, which the broker dead-letters when the queue has a
//     dead-letter exchange (x-dead-letter-exchange) and drops otherwise,
//     logged at error level and passed to WithOnDead.
//   - outbox.Unavailable (the handler's own dependency is down) or
//     idempotency.ErrInProgress (the event is being handled elsewhere):
//     requeued without counting, after a pause (Unavailable: the retry
//     delay doubling to 30s).
//   - any other error: requeued after WithRetryDelay. RabbitMQ puts a
//     requeued message back at once, at the head of the queue; the delay,
//     which the worker waits out, is what keeps a failing handler from
//     spinning.
//
// Failures are counted by each consumer in memory, per event id: a
// message requeued to another consumer, or after a restart, counts from
// zero there. For a bound that holds across consumers and restarts, use
// quorum queues and their x-delivery-limit, which the broker enforces
// (Delivery.DeliveryCount reads its count).
//
// When its channel or connection closes, or consuming fails (a queue that
// does not exist, a refusal), Run logs it and starts again after a
// backoff; it returns only when its context ends, after the messages in
// hand are finished (messages received but not started go back to the
// queue when its channel closes), or for an invalid configuration.
//
// # Dead here is not dead in the outbox
//
// The relay's work ends when the broker confirmed the message: the outbox
// event is then published, whatever its consumers do. A message a
// consumer declares dead is dead in that queue only (see the dead-letter
// queue, WithOnDead); the relay's dead letters (`outbox dead list`,
// relay.Inspector.ListDead) do not show it. Likewise outbox.Envelope.Attempt counts
// the relay's attempts to publish the event, not the consumer's: use
// DeliveryFrom (Delivery.Attempt, Delivery.LastAttempt).
//
// # Order
//
// The relay publishes the events of one PartitionKey one at a time in
// their commit order, and a queue keeps the order of its messages, but
// the order ends at the consumers: a requeued message comes back after
// later ones were handed out, and several consumers (or WithConcurrency
// above 1) handle a key's messages at once. One consumer with concurrency
// 1 on a queue (or RabbitMQ's single-active-consumer) keeps the order
// except around failures.
//
// # Exactly-once effects
//
// Idempotent records each handler's success under "<event id>:<handler
// name>" (idempotency.HandlerKey) in an idempotency.Store: duplicates and
// redeliveries of an event skip a handler that already succeeded.
// IdempotentTx runs the handler in a database transaction together with
// its record, so that its writes to that database happen exactly once.
package outboxamqp
