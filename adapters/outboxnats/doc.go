// Package outboxnats delivers outbox events through NATS JetStream: a
// Publisher for the relay, the transport of package consume's Consumer
// over a durable pull consumer (NewConsumer), and a reader of dead-letter
// streams (NewDeadLetters). It is a module of its own
// (github.com/gormoutbox/outbox/adapters/outboxnats), so that only the
// applications that use NATS download nats.go.
//
// # Publishing
//
//	nc, _ := nats.Connect(url, nats.MaxReconnects(-1)) // reconnect for ever
//	js, _ := jetstream.New(nc)
//	js.CreateStream(ctx, jetstream.StreamConfig{
//		Name: "SHOP", Subjects: []string{"shop.>"},
//		Duplicates: time.Hour, // see "Duplicates" below
//	})
//	pub, err := outboxnats.NewPublisher(js, outboxnats.WithSubjectPrefix("shop."))
//	r, err := relay.New(db, pub)
//	err = r.Start(ctx)
//
// Each event becomes one message on the subject named by its Topic ("shop."
// + "orders"), or by WithSubjectFunc, or the default subject ("outbox")
// for events without one. Its data is the envelope's CloudEvents 1.0 JSON
// (decode it with outbox.DecodeEnvelope); its headers are Nats-Msg-Id (the
// event id), Content-Type, Outbox-Event-Type, Outbox-Partition-Key and the
// event's own headers (traceparent, tracestate, …), except names reserved
// by NATS. A subject that is not valid (an empty token, a wildcard, white
// space) makes the event dead at once (ErrInvalidSubject, permanent).
//
// The relay hands the Publisher a whole batch: PublishBatch publishes
// every message asynchronously (PublishMsgAsync), then waits for each
// acknowledgement, up to WithAckTimeout (10s) or the relay's deadline, and
// reports each event's own result.
//
// # Duplicates
//
// The relay delivers at least once: a relay that crashed, or lost its
// lease, after JetStream stored a batch but before it recorded it, has
// those events published again by the next relay. Because Nats-Msg-Id is
// the event id, JetStream drops the second copy when it arrives within the
// stream's duplicate window (StreamConfig.Duplicates, two minutes unless
// set), and acknowledges it as a duplicate, which the Publisher counts as
// published. The window bounds this: a redelivery comes after the dead
// relay's lease expired (relay.WithLease, 30s by default) plus the relay's
// backoff, or much later when someone replays an event (outbox dead
// replay, outbox redeliver). Set Duplicates well above the lease, an hour
// for example; the server keeps each message id for the window, which
// costs memory per message published within it. Beyond the window a
// redelivered event is stored again, and consumers receive a second
// message with the same event id: the idempotency middleware (Idempotent,
// IdempotentTx) is what makes effects happen once, whatever the window.
//
// # Outages
//
// When NATS cannot take the batch, the error is outbox.Unavailable: the
// relay releases the batch without spending any event's attempts and
// backs off. That covers a connection that is not connected (reconnecting,
// closed, draining: the Publisher sends nothing then, rather than filling
// the client's reconnect buffer), acknowledgements that do not come in
// time or fail because the connection dropped, a stream or JetStream that
// does not answer, too many publishes in flight, and JetStream's 503
// replies (insufficient resources, a stream full under DiscardNew, no
// quorum). Use nats.MaxReconnects(-1): a connection that gave up
// reconnecting is closed for good, and the relay then reports the
// Publisher unavailable until the process restarts.
//
// A message larger than the server's max payload or the stream's
// MaxMsgSize can never be stored: ErrInvalidMessage, permanent (dead at
// once; replay it after raising the limit).
//
// # A subject no stream captures
//
// A message to a subject that no stream captures gets "no responders",
// which is also what a stream that is not serving (a restarting server, a
// leader election) gives. The Publisher asks JetStream which stream
// captures the subject. If one does, or if JetStream does not answer, the
// error is outbox.Unavailable. If JetStream says that none does, the error
// wraps ErrNoStream and is an ordinary failure: the relay retries the
// event with backoff, spending attempts, and marks it dead after them. Not
// Unavailable, because the relay would then hold back every event, of
// every subject, for as long as one subject has no stream; not Permanent,
// because the usual cause, a stream not yet created when a new Topic
// ships, is fixed in minutes, within the retries. An event that did go
// dead is replayed with `outbox dead replay` once the stream exists.
//
// # Consuming
//
// Handlers are package consume's, the same on every broker, and so is the
// policy that settles each message from its handler's error (see
// consume.Handler):
//
//	store, _ := idempotency.NewStore(db)
//	h := consume.IdempotentTx(store, "stats", consume.TxHandlerOf(
//		func(ctx context.Context, tx *gorm.DB, o Order) error {
//			return tx.Exec("UPDATE stats SET orders = orders + 1").Error // once per event
//		}))
//	c, err := outboxnats.NewConsumer(js, "SHOP", "stats", h,
//		outboxnats.WithFilterSubject("shop.orders"),          // JetStream's options
//		outboxnats.WithDeadLetterSubject("shop-dead.stats"),
//		consume.WithConcurrency(4), consume.WithMaxDeliveries(5)) // consume's, shared by every broker
//	err = c.Run(ctx) // until ctx ends
//
// The Consumer creates the durable pull consumer (or updates it: AckPolicy
// explicit, WithAckWait, MaxDeliver unlimited, WithFilterSubject,
// WithConsumerConfig), again whenever it disappears, and fetches up to
// WithBatch messages at a time, waiting up to WithFetchWait; each batch
// it handles is what the fetch brought so far. Then, for each message:
//
//   - success: acknowledged (Ack).
//   - dead (outbox.Permanent, a message that is not an outbox event, the
//     last counted attempt failed): published to the WithDeadLetterSubject
//     subject if any (data and headers, plus the Outbox-Dead-… headers
//     that say why and where from), then terminated (Term: the server
//     never delivers it again to this consumer), and passed to
//     consume.WithOnDead.
//   - retried after a delay (a failure, outbox.Unavailable, outbox.Snooze,
//     idempotency.ErrInProgress): handed back with NakWithDelay.
//
// The server counts every delivery (NumDelivered), those handed back
// without a counted run too; so the Consumer enforces
// consume.WithMaxDeliveries itself, with the server's MaxDeliver left
// unlimited (the server never drops a message silently): a delivery's
// Attempt is NumDelivered less the deliveries this consumer excused. It
// remembers those in memory: a delivery excused by another process, or
// before a restart, counts. A message that arrives with its attempts
// already spent (its consumers crashed while handling it) is dead without
// running the handler.
//
// A handler reads JetStream's details of its message from
// consume.DeliveryFrom(ctx): its Details is a Message (stream, durable,
// subject, sequences, NumDelivered, headers, data).
//
// While a Consumer holds fetched messages (waiting in the fetch or the
// batch, or running) it marks each in progress every third of the ack
// wait (WithAckWait, 30s), so that no message is handled by two consumers
// of the durable at once, whatever the batch size and the handler's time
// within its timeout (consume.WithHandlerTimeout, the ack wait unless
// set). A consumer that crashes, or is frozen, stops marking them: after
// the ack wait the server delivers them to another consumer. Run several
// Consumers with the same durable name, in one process or many, to share
// a stream.
//
// JetStream errors (a server down, the consumer deleted) are logged and
// retried with backoff. When Run's context ends, the messages in hand are
// finished, and the rest, with what the fetch still brings (within
// WithFetchWait, 5s at most), handed back uncounted.
//
// # Dead letters
//
// NewDeadLetters reads the stream that captures dead-letter subjects, page
// by page, by stream sequence (GetMsg), for the admin page and the CLI
// (consume.DeadLetterReader), and replays chosen dead letters
// (consume.DeadLetterReplayer): each is published again to the subject it
// went dead from, then deleted from the dead-letter stream.
//
// # Dead here is not dead in the outbox
//
// The relay's work ends when the message is in the stream: the outbox
// event is then published, whatever its consumers do. A message that a
// Consumer declares dead is dead for that durable consumer only: the
// outbox row stays published, the relay's dead letters (`outbox dead
// list`, relay.Inspector.ListDead) do not show it; DeadLetters does.
// Likewise outbox.Envelope.Attempt counts the relay's attempts to publish
// the event (1 unless a publish failed), not the consumer's: use
// consume.DeliveryFrom for those.
//
// # Key order
//
// The relay publishes the events of one PartitionKey one at a time, in
// commit order, and a stream keeps the order of its messages. A Consumer
// handles a key's messages of one batch one after the other
// (consume.WithConcurrency runs other keys at once), but a failed message
// is delivered again after later ones, and several Consumers of a durable
// handle messages at once: that order is not kept beyond the batch. The
// key is in the Outbox-Partition-Key header, for consumers that need to
// partition.
package outboxnats
