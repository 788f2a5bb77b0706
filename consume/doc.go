// Package consume is the consumer side of the outbox, written once for
// every broker: the handler vocabulary that application code is written
// against, and the Consumer that runs handlers with one policy over a
// broker adapter's Transport.
//
// # Handlers, once for every broker
//
// A handler takes the event's envelope:
//
//	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
//		var o Order
//		if err := e.Unmarshal(&o); err != nil {
//			return outbox.Permanent(err) // dead at once: retrying cannot help
//		}
//		return ship(ctx, o)
//	})
//
// or its decoded payload (HandlerOf, TxHandlerOf), checked and upcast by
// an event registry with Registered. Idempotent and IdempotentTx make a
// handler act once per event whatever the redeliveries, with records in
// an idempotency.Store; IdempotentTx commits the handler's writes and its
// record together. EnvelopeFrom and DeliveryFrom give a handler the event
// and its delivery (attempt, max attempts, the broker's own details).
//
// The same handler value runs on every adapter: in the relay's process
// (inproc.Mux), behind an asynq server (outboxasynq.Handler), and on the
// Consumers of Redis Streams (outboxredis), RabbitMQ (outboxamqp), NATS
// JetStream (outboxnats) and Kafka (outboxkafka).
//
// # The policy
//
// A handler's error decides its message's fate, the same way on every
// broker (see Handler): nil acknowledges it; outbox.Permanent sends it to
// the dead letter at once; outbox.Unavailable (the handler's own
// dependency is down) hands it back uncounted and pauses the consumer (1s
// doubling to 30s); outbox.Snooze and idempotency.ErrInProgress hand it
// back uncounted after a delay; any other error retries it after
// WithRetryDelay, doubling up to WithMaxRetryDelay, until WithMaxDeliveries
// counted runs failed, when it is dead. Each run has WithHandlerTimeout; a
// panic is recovered and counts as a failure. A message that is not an
// outbox event is dead at once (ErrMalformed).
//
// Messages of one partition key are handled one after the other, in the
// order received, and after one that did not succeed the rest of its key
// in the batch is handed back unstarted; other keys run at once, up to
// WithConcurrency. Across consumers, key order is the broker's business:
// Redis Streams keep it with a key chain, Kafka by partition (see each
// adapter).
//
// Each run is a consumer span ("outbox consume <type>") continuing the
// event's trace; the metrics outbox.consumer.messages (by outcome) and
// outbox.consumer.handle.duration are recorded through OpenTelemetry;
// logs are one line per batch for failures, and one for dead messages.
//
// # Consumers and transports
//
//	c, err := outboxredis.NewConsumer(rdb, "shop:orders", "billing", hostname, h,
//		consume.WithMaxDeliveries(5),     // shared options, for every broker
//		outboxredis.WithMinIdle(time.Minute), // the broker's own
//	)
//	err = c.Run(ctx) // until ctx ends
//
// An adapter's NewConsumer returns a *Consumer over its Transport: how
// messages arrive (Receive), and how each is settled (Ack, Retry with a
// delay and whether the delivery counts, Dead). Options are one list: the
// shared ones of this package and the adapter's own, made with
// TransportOption. A Transport of your own runs with New, and proves
// itself with the conformance suite of package consumetest, which every
// adapter passes against its real broker.
package consume
