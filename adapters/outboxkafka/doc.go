// Package outboxkafka publishes outbox events to Apache Kafka through
// franz-go (github.com/twmb/franz-go/pkg/kgo), and consumes them: a
// Publisher that the relay uses to produce one record per event, a whole
// batch at a time, and a Consumer (package consume's, over a consumer
// group) that hands each event to a handler. It is a Go module of its own
// (github.com/gormoutbox/outbox/adapters/outboxkafka), so that
// applications that do not use Kafka do not download its client.
//
//	cl, err := kgo.NewClient(kgo.SeedBrokers("kafka-1:9092", "kafka-2:9092"), kgo.ProducerLinger(0))
//	pub, err := outboxkafka.NewPublisher(cl, outboxkafka.WithTopic("shop.events"))
//	r, err := relay.New(db, pub, relay.WithAttemptLog())
//	err = r.Start(ctx)
//
// # Records
//
// Each event becomes one record, to the event's Topic, or WithTopic's
// topic when it has none, or the topic WithTopicFunc chooses. An event
// without a topic fails with ErrNoTopic, marked outbox.Permanent: the
// Publisher never asks the brokers to create a topic, and the client asks
// for none unless it is configured to (kgo.AllowAutoTopicCreation).
//
// The record key is the event's PartitionKey, else its AggregateID
// (none when both are empty), so that a key's events go to one partition.
// The value and headers follow the Layout (WithLayout):
//
//   - Structured (the default), the CloudEvents Kafka protocol binding in
//     structured mode: the value is the envelope's CloudEvents 1.0 JSON
//     (outbox.DecodeEnvelope reads it back), the content-type header is
//     ContentType, and the event's own headers (traceparent, tracestate,
//     …) are record headers too.
//   - Binary, the binding's binary mode: the value is the payload,
//     content-type its media type, each attribute and extension of the
//     envelope a "ce_" header (ce_id, ce_source, ce_type, ce_time,
//     ce_subject, ce_partitionkey, ce_traceparent, …), and the event's
//     own headers as they are.
//   - Debezium, what Debezium's outbox event router writes with its
//     default settings, so that consumers written for it read these events
//     unchanged (a way off Debezium and Kafka Connect): topic
//     "outbox.event.<AggregateType>" (WithTopicFunc to route otherwise),
//     key the AggregateID, value the payload as it is, one header "id"
//     holding the event id, nothing else. Debezium's converters decide how
//     it writes a value and a key: this layout is what it writes with a
//     StringConverter or BinaryDataConverter, or table.expand.json.payload
//     and a JsonConverter without schemas.
//
// # Batches and errors
//
// The relay hands PublishBatch the events of a claimed batch, at most one
// per partition key; it produces them all at once and then awaits the
// records' promises, for at most WithAckTimeout (and never past the relay's
// deadline). Each event gets its own outcome (see PublishBatch): retriable
// broker errors once the client's own retries are spent, timeouts, an
// unreachable cluster and a closed client are outbox.Unavailable (the relay
// spends no attempt); a record larger than the producer's limits (checked
// before sending), one the broker refuses alone (MESSAGE_TOO_LARGE,
// INVALID_RECORD), a topic that does not exist once the client's
// unknown-topic retries are spent (kgo.UnknownTopicRetries), and a topic
// the client may not write to are outbox.Permanent, with the broker's
// reason. Keep kgo.ProducerBatchMaxBytes at or below the topics'
// max.message.bytes, so that a record too large is refused before sending,
// not by the broker.
//
// A published event's receipt is "topic/partition@offset"
// (relay.SetReceipt): with relay.WithAttemptLog, the attempt log keeps it
// with the published outcome (relay.Attempt.Receipt), and each batch's
// debug log line gives the offsets written per partition.
//
// # Order and duplicates
//
// A key's events reach its partition in commit order: the relay hands
// them over one after the other, the key keeps them on one partition, and
// the client's idempotent producer (on by default) keeps a partition's
// records in order across its retries. NewPublisher refuses a client that
// would break this: one whose partitioner does not keep a key on one
// partition, or with idempotent writes disabled and more than one produce
// request in flight. Changing a topic's partition count moves keys. The
// relay orders events by PartitionKey only: events without one (keyed by
// their AggregateID) share a partition, but are delivered in no
// particular order; give an aggregate's events its PartitionKey (Track
// does) for commit order.
//
// Delivery is at least once: a record whose acknowledgement did not come
// in time is produced again later, and the client may still deliver the
// first one (it keeps records it sent while the brokers are unreachable,
// and sends them when they return); a relay that crashes after producing
// and before recording produces again. A duplicate follows its original
// in the partition; consumers deduplicate by event id (the id field of the
// CloudEvents value, ce_id, or the id header of the Debezium layout), with
// package idempotency.
//
// # The client
//
// The Publisher uses the client it is given, and never closes it. The
// client's default linger (kgo.ProducerLinger, 10ms) delays every batch
// by that much; kgo.ProducerLinger(0) sends a batch at once. A client with
// a transactional id, manual flushing or kgo.DefaultProduceTopicAlways is
// refused.
//
// # Consuming
//
//	client := []kgo.Opt{kgo.SeedBrokers("kafka-1:9092", "kafka-2:9092")}
//	c, err := outboxkafka.NewConsumer(client, "shop.events", "billing", h,
//		consume.WithConcurrency(8), consume.WithMaxDeliveries(5), // shared options
//		outboxkafka.WithDeadLetterTopic("shop.events.dead"))      // Kafka's own
//	err = c.Run(ctx) // until ctx ends
//
// NewConsumer takes the client's connection options, not a client: each
// Run makes a client of its own in the consumer group (committing offsets
// itself, rebalances blocked while a batch is in hand) and closes it,
// leaving the group, when it returns. Handlers are package consume's
// (HandlerFunc, HandlerOf, TxHandlerOf, Idempotent, IdempotentTx,
// Registered), with its policy: the handler's error decides each record's
// fate. consume.DeliveryFrom gives the Record (topic, partition, offset,
// group, key, headers) in Delivery.Details. The Consumer reads both
// CloudEvents layouts, Structured and Binary; a record of the Debezium
// layout, or anything else, is not an event (consume.ErrMalformed): dead at
// once.
//
// Records of one partition are handled one at a time, in offset order (so
// a key's events in commit order), up to consume.WithConcurrency
// partitions at once. An offset is committed, after each batch, only once
// its record and every one before it in the partition were settled:
// handled, or dead (and produced to the dead-letter topic). Delivery is at
// least once: a crash, or a commit that failed, hands records that were
// handled to the next member again; use consume.IdempotentTx. A retried
// record stays at the head of its partition until its retry delay passed,
// and the records after it wait for it; outbox.Unavailable pauses the
// Consumer without counting the run.
//
// Attempts are counted in memory, per record, by the member holding the
// partition: a rebalance that moves the partition, or a restart, counts
// again from the committed offset (a record that crashed its consumer
// every time is read again forever; bound it with the handler timeout).
// A rebalance waits until the batch in hand is settled: once the group
// asks for one, the records of the batch not yet started are handed back
// (read again by the partition's next owner), those running finish, and
// what was settled is committed before the partitions go. Keep a handler
// run below the group's rebalance timeout (kgo.RebalanceTimeout): the
// default handler timeout is half of it. A partition whose records
// waiting in the Consumer reach WithMaxPollRecords (a record retried, the
// ones behind it) is not fetched meanwhile.
//
// # Dead letters
//
// With WithDeadLetterTopic, a dead record is produced to that topic (which
// must exist) with its key, value and headers and the HeaderDead* headers
// (reason, source topic, partition and offset, group, deliveries) before
// its offset is committed. NewDeadLetters reads it by offset for the admin
// page and the CLI (consume.DeadLetterReader; a message's ID and the
// cursor are "partition:offset") and replays records
// (consume.DeadLetterReplayer): each goes back to the partition it was
// read from, without the dead headers and with HeaderReplayedFrom, and
// the consumer group reads it again (after the events of its key
// published since). Kafka cannot delete a record: ReplayDead then adds a
// marker to the dead-letter topic (HeaderReplayed, the replayed offset),
// and DeadLetters leaves replayed records out.
//
// # Testing
//
// The tests run against github.com/twmb/franz-go/pkg/kfake, an in-process
// Kafka cluster speaking the real protocol, started by the tests with
// three brokers, and against a real cluster too when OUTBOX_KAFKA_BROKERS
// names its seed brokers (host:port,…): the publisher's faults, and the
// Consumer through the consumer kit's conformance suite
// (consume/consumetest), rebalances, moved leaders, a lost coordinator and
// injected fetch and commit errors. The long fault scenarios among them
// (brokers cut or removed, a relay killed) run only with
// OUTBOX_FAULT_SUITE=1, as CI sets.
package outboxkafka
