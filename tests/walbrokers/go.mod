module github.com/gormoutbox/outbox/tests/walbrokers

go 1.26.0

replace (
	github.com/gormoutbox/outbox => ../..
	github.com/gormoutbox/outbox/adapters/outboxamqp => ../../adapters/outboxamqp
	github.com/gormoutbox/outbox/adapters/outboxasynq => ../../adapters/outboxasynq
	github.com/gormoutbox/outbox/adapters/outboxnats => ../../adapters/outboxnats
	github.com/gormoutbox/outbox/adapters/outboxredis => ../../adapters/outboxredis
	github.com/gormoutbox/outbox/tests => ../
)

require (
	github.com/gormoutbox/outbox v0.0.0
	github.com/gormoutbox/outbox/adapters/outboxamqp v0.0.0
	github.com/gormoutbox/outbox/adapters/outboxnats v0.0.0
	github.com/gormoutbox/outbox/tests v0.0.0 // tests/internal/servers, in the fault suite's module
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	gorm.io/driver/postgres v1.6.3
	gorm.io/gorm v1.31.2
)

require (
	filippo.io/edwards25519 v1.1.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-sql-driver/mysql v1.8.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pglogrepl v0.0.0-20251213150135-2e8d0df862c1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.10.0 // indirect
	github.com/jackc/puddle/v2 v2.2.2 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
