// Package outbox is a transactional outbox for GORM: the events that
// describe a write commit in the same database transaction as the write,
// and a relay (package relay) delivers them afterwards, at least once.
//
// # Installing
//
//	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{})
//	err = db.Use(&outbox.Plugin{})   // the zero value works
//	err = outbox.Migrate(db)         // or apply the files of package migrations
//
// PostgreSQL, MySQL 8 / MariaDB and SQLite (gorm.io/driver/sqlite with cgo,
// or the pure-Go github.com/ncruces/go-sqlite3/gormlite; the package
// imports neither) are supported. On MySQL, open the connection with
// parseTime=true (any loc works); on SQLite, with _txlock=immediate and a
// busy timeout (_busy_timeout=5000, or _pragma=busy_timeout(5000) in a
// file: URI for the pure-Go driver).
//
// # Emitting events
//
// Emit writes through the transaction of the *gorm.DB it is given. From a
// model hook, that is the statement's transaction (GORM's default
// transaction, or the caller's db.Transaction):
//
//	func (o *Order) AfterCreate(tx *gorm.DB) error {
//		return outbox.Emit(tx, outbox.Event{
//			Type:          "order.created",
//			AggregateType: "order",
//			AggregateID:   strconv.Itoa(int(o.ID)),
//			PartitionKey:  "customer-" + o.CustomerID,
//			Payload:       o,
//		})
//	}
//
// Inside db.Transaction, call Emit with the transaction's tx. Outside a
// transaction, Emit returns ErrNotInTransaction and writes nothing: an
// event that could commit without its business rows, or survive their
// rollback, is what the outbox exists to prevent.
//
// Alternatively an aggregate embeds Recorder, records events while its
// methods run, and the plugin writes them when the aggregate is saved.
//
// With no code at all, Track makes every create, update and delete of a
// model write "<name>.created", "<name>.updated" or "<name>.deleted", one
// per affected row, in the write's transaction:
//
//	err = outbox.Track(db, &Order{})
//
// Tracking adds events and changes nothing else: the statement writes the
// rows, and returns the counts and errors, it would untracked.
//
// # Registry and metadata
//
// A Registry declares, per event type and version, the Go type of the
// payload (Register[T]) and its checks (required fields, a tenant field
// that must equal TenantID, a Validate function). With
// Plugin{Registry: reg}, every write is checked in the caller's
// transaction, and refused with ErrInvalidEvent (nothing written) when the
// type and version are not registered (unless the registry is Lenient,
// which logs each such type once) or the payload does not match. Upcasters
// (RegisterUpcaster) turn version N into N+1; relays and consumer helpers
// given the registry upcast each event before delivering it
// (Envelope.Version is the version delivered) and check it again: an event
// whose stored payload no longer matches is dead at once, with the reason.
// RegisterTracked registers the event types of a tracked model (payload
// Change).
//
// WithMetadata attaches request metadata (tenant, actor, request and
// correlation ids) to a context; every event written by a statement run
// with that context carries it in its headers, and RequireMetadata makes
// the registry refuse events without it.
//
// To announce a state change from hooks, note it in BeforeUpdate (or
// BeforeSave), where tx.Statement.Changed("Status") is meaningful, in
// tx.Statement.Settings or on the Recorder, and emit it in AfterUpdate,
// where Changed is always false (see the Emit example "stateChange").
//
// # WAL mode
//
// On PostgreSQL 14 and later, Plugin.WAL writes each event as a
// transactional logical decoding message (pg_logical_emit_message) instead
// of a row, and the relays stream the messages from a replication slot in
// commit order (see WAL, WALMessage for the format, MigrateWAL, DropWAL,
// and package relay). db.Use refuses WAL mode until the slot exists, and
// a refused Plugin is not installed (outbox.Migrate(db) would not see it):
// create the slot first with the Plugin's Migrate method (or its
// AutoMigrate, or `outbox migrate --wal`), then call db.Use. Emit,
// Recorder and Track are used as in table mode;
// an event ID is delivered again when written again (no dedupe at write),
// and an event that fails delivery, or is delayed by AvailableAt, moves to
// the table, whose retries and dead letters take over.
//
// # What is guaranteed
//
//   - The event rows commit with the transaction and vanish with its
//     rollback, whatever the cause: an error from a hook or a later
//     statement, a panic in db.Transaction, a rolled-back savepoint.
//   - The events of one statement, such as a CreateInBatches of many models
//     whose hooks emit, are written in one multi-row INSERT (per 500 rows).
//   - A statement of a model that emits (its hooks call Emit, or it has
//     recorded events) commits its rows only with its events: with gorm's
//     SkipDefaultTransaction the plugin opens the transaction GORM skipped
//     for such statements; db.Save of a new row with its primary key set
//     writes its events with the insert, not in the update GORM tries
//     first; recorded events are cleared only once the save's own
//     transaction committed (see Recorder).
//   - An invalid event fails with an error wrapping ErrInvalidEvent that
//     names the field; nothing is written. A payload over
//     Plugin.MaxPayloadSize (1 MiB by default) is invalid.
//   - An Emit that fails fails its transaction, on every database, even if
//     the caller ignores its error: the statement of a hook fails, and an
//     enclosing transaction (db.Transaction, CreateInBatches) is rolled
//     back at once, so that it cannot commit (see Emit).
//   - Event.ID is a dedupe key: the same ID with the same content is stored
//     once; with other content the write fails with ErrDuplicateEvent. This
//     holds with any DSN flag (on MySQL, events with an ID set are compared
//     with the stored rows after every write, as clientFoundRows=true makes
//     the affected-row count useless).
//   - Events sharing a PartitionKey get ids in the commit order of their
//     transactions: writers of one key wait for each other from Emit until
//     commit (a transaction-scoped advisory lock on PostgreSQL, a row of
//     outbox_events_keys on MySQL; SQLite has one writer). The relay
//     delivers them in that order. One Emit may carry any number of keys:
//     on PostgreSQL a transaction that locks more than 1,000 keys takes one
//     lock of the table's whole key space instead (its lock table holds
//     about 64 locks per connection), which holds back every other writer
//     of a keyed event of the table until it ends. On MySQL, when the first writer of a
//     brand-new key rolls back while two or more others wait for it, one
//     of those can fail with InnoDB's deadlock error 1213; retry the
//     transaction, as with any deadlock.
//   - The W3C trace context of the context's current OpenTelemetry span is
//     stored in the "traceparent" header, so that delivery continues the
//     trace.
//   - No payload byte reaches a log line: the outbox's statements pass
//     through the application's GORM logger (on slow or failed queries) with
//     payloads and headers replaced by their sizes.
//
// Return Emit's error, and every statement's error, from hooks and from the
// db.Transaction function: a failed Emit dooms its transaction anyway, but
// only the returned error says why; and any other statement's error that
// is ignored there lets MySQL and SQLite commit the rest.
//
// # Delivery
//
// A worker runs relay.New(db, publisher).Start(ctx); publishers deliver an
// Envelope (the event as stored, with its attempt number) to asynq, Redis
// Streams or in-process handlers. Handlers return Permanent(err) for
// failures that retrying cannot fix and Unavailable(err) when their
// transport is down.
//
// # What this means for a consumer
//
//   - At least once: a handler can see an event again (a relay that
//     crashed or paused past its lease, a broker that lost an ack). Make
//     its effect idempotent: package idempotency's DoTx makes a database
//     effect happen exactly once, Do and SideEffect guard other effects.
//   - Never a rolled-back write: a delivered event's transaction committed.
//   - Envelope.ID is stable across redeliveries and is the key to dedupe
//     on; Envelope.Attempt counts the relay's attempts, not a broker's
//     retries.
//   - Events of one PartitionKey leave the relay one at a time in commit
//     order. A broker's concurrent workers may reorder them unless the
//     adapter's key-order mode is on (outboxasynq.KeyOrder,
//     outboxredis.WithKeyOrder); in-process handlers keep the order.
//   - A dead event stops blocking its key and waits for an operator
//     (relay.Replay, outbox dead replay); nothing unpublished is deleted.
package outbox
