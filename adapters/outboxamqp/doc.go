// Package outboxamqp carries outbox events over RabbitMQ (AMQP 0-9-1,
// github.com/rabbitmq/amqp091-go): a Publisher that the relay uses to
// publish one persistent message per event with publisher confirms, the
// transport of package consume's Consumer over a queue (NewConsumer), and
// a reader of dead-letter queues (NewDeadLetters). It is a Go module of
// its own (github.com/gormoutbox/outbox/adapters/outboxamqp), so that
// applications that do not use RabbitMQ do not download its client.
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
// Give WithDial (the Publisher's) and WithConsumerDial (the Consumer's),
// and they dial a new connection themselves (see Dialer): the Publisher
// on its next publish after the connection closed (until then, and while
// the broker is down, every publish is Unavailable), the Consumer before
// it consumes again (after a backoff of 100ms doubling to 5s). The
// connection you pass in is never closed by this package; the ones it
// dialled are closed by Publisher.Close and when the Consumer's Run
// returns. Without a dial function, a closed connection makes every
// publish Unavailable, and the Consumer waits, until the connection is
// open again, which happens only if it was dialled with amqp091's
// experimental Config.Recovery (not what this package is tested with):
// the events wait in the outbox, nothing is lost, but nothing moves until
// the process restarts. Calls that amqp091 makes without a context
// (opening a channel, declaring the topology) are abandoned at the
// relay's deadline, so a broker that hangs holds the relay no longer than
// its lease.
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
// (consume.Idempotent, consume.IdempotentTx).
//
// # Consuming
//
// Handlers are package consume's, the same on every broker, and so is the
// policy that settles each message from its handler's error (see
// consume.Handler):
//
//	store, _ := idempotency.NewStore(db)
//	h := consume.IdempotentTx(store, "stats", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
//		return tx.Exec("UPDATE stats SET orders = orders + 1").Error // exactly once per event
//	})
//	c, err := outboxamqp.NewConsumer(nil, "order-stats", h,
//		outboxamqp.WithConsumerDial(dial), outboxamqp.WithConsumerTopology(declare), // RabbitMQ's options
//		consume.WithConcurrency(4), consume.WithMaxDeliveries(5)) // consume's, shared by every broker
//	err = c.Run(ctx) // until ctx ends
//
// The Consumer opens a channel (declaring WithConsumerTopology first),
// sets its prefetch (WithPrefetch) and consumes the queue with manual
// acknowledgements, under WithConsumerTag. Each batch is what the channel
// has buffered, up to the prefetch. Then, for each message:
//
//   - success: acknowledged (basic.ack).
//   - dead (outbox.Permanent, a message that is not an outbox event, the
//     last counted attempt failed): rejected without requeue (basic.nack),
//     which the broker dead-letters when the queue has a dead-letter
//     exchange (x-dead-letter-exchange) and drops otherwise; then
//     consume.WithOnDead is called.
//   - retried after a delay (a failure, outbox.Unavailable, outbox.Snooze,
//     idempotency.ErrInProgress): RabbitMQ puts a requeued message back at
//     once, at the head of the queue, so the message stays unacknowledged
//     on the channel for the delay, and is then requeued (basic.nack with
//     requeue) while the batch goes on. It takes up the prefetch
//     meanwhile: keep the prefetch above what may wait at once, and the
//     delays (consume.WithMaxRetryDelay) under the broker's
//     consumer_timeout (30 minutes by default).
//
// Failures are counted by each consumer in memory, per event id: a
// message requeued to another consumer, or after a restart, counts from
// zero there. For a bound that holds across consumers and restarts, use
// quorum queues and their x-delivery-limit, which the broker enforces
// (Message.DeliveryCount reads its count); a message past it is
// dead-lettered by the broker with the reason delivery_limit.
//
// A handler reads RabbitMQ's details of its message from
// consume.DeliveryFrom(ctx): its Details is a Message (queue, tags,
// exchange, routing key, redelivered, headers, body).
//
// When its channel or connection closes, or consuming fails (a queue that
// does not exist, a refusal, the broker cancelling the consumer), the
// Consumer logs it (a warning for a lost connection) and starts again
// after a backoff; what was received and not settled goes back to the
// queue with the channel. When Run's context ends, the messages in hand
// are finished and the rest handed back.
//
// # Dead letters
//
// NewDeadLetters reads a dead-letter queue page by page for the admin page
// and the CLI (consume.DeadLetterReader), without taking its messages for
// good (basic.get, then basic.nack with requeue), and replays chosen ones
// (consume.DeadLetterReplayer): it publishes each again to the exchange
// and routing key of its x-death header, confirmed, then acknowledges it
// from the dead-letter queue. The broker's x-death says only "rejected":
// the handler's error is in the consumer's log and its WithOnDead.
//
// # Dead here is not dead in the outbox
//
// The relay's work ends when the broker confirmed the message: the outbox
// event is then published, whatever its consumers do. A message a
// consumer declares dead is dead in that queue only (see the dead-letter
// queue and DeadLetters); the relay's dead letters (`outbox dead list`,
// relay.Inspector.ListDead) do not show it. Likewise
// outbox.Envelope.Attempt counts the relay's attempts to publish the
// event, not the consumer's: use consume.DeliveryFrom (Delivery.Attempt,
// Delivery.LastAttempt).
//
// # Order
//
// The relay publishes the events of one PartitionKey one at a time in
// their commit order, and a queue keeps the order of its messages. A
// Consumer handles a key's messages of one batch one after the other
// (consume.WithConcurrency runs other keys at once), but the order ends
// there: a requeued message comes back after later ones, and several
// consumers of a queue handle a key's messages at once. One consumer on a
// queue (or RabbitMQ's single-active-consumer) keeps the order except
// around failures.
package outboxamqp
