// Package onehandler shows, and its test proves, that a handler is written
// once for every broker: one consume.Handler value (an idempotent, typed
// handler writing to the database) runs unchanged in the relay's process
// (inproc), behind an asynq server, and on the consumers of Redis
// Streams, RabbitMQ, NATS JetStream and Kafka. Only the wiring differs:
//
//	h := consume.IdempotentTx(store, "welcome", consume.TxHandlerOf(welcome))
//
//	mux.Handle("user.signed_up", "welcome", h)                       // inproc
//	asynqMux.Handle("user.signed_up", outboxasynq.Handler(h))          // asynq
//	outboxredis.NewConsumer(rdb, "users", "mail", host, h)           // Redis Streams
//	outboxamqp.NewConsumer(conn, "users.mail", h)                    // RabbitMQ
//	outboxnats.NewConsumer(js, "USERS", "mail", h)                   // NATS JetStream
//	outboxkafka.NewConsumer(kafkaOpts, "users", "mail", h)           // Kafka
//
// It is a module of its own, since it imports every broker's client.
package onehandler
