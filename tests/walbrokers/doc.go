// Package walbrokers tests WAL mode (outbox.WAL) end to end through the
// RabbitMQ and NATS JetStream publishers, which are modules of their own:
// a throw-away PostgreSQL with wal_level=logical (tests/internal/servers),
// a relay streaming its slot, the brokers of OUTBOX_AMQP_URL and
// OUTBOX_NATS_URL. It is a module of its own so that the core module
// needs neither broker's client.
package walbrokers
