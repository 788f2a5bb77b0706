// Package outboxtest helps an application test its use of the outbox:
// a database for each test, assertions on what a unit of work emitted, and
// the outbox delivered synchronously through the application's handlers.
// It needs only the standard library's testing package: any testing.TB
// will do.
//
// # A database for each test
//
//	db := outboxtest.DB(t, outboxtest.AutoMigrate(&Order{}))
//
// DB returns a database of the test's own with the outbox plugin installed
// and the outbox migrated, dropped when the test ends: a SQLite file by
// default, or a schema (PostgreSQL) or database (MySQL/MariaDB) of its own
// on the server that Postgres(dsn), MySQL(dsn) or the variable DatabaseEnv
// (OUTBOXTEST_DATABASE) names, so that one suite runs on SQLite on a
// laptop and on the production dialect in CI:
//
//	OUTBOXTEST_DATABASE=postgres://app@localhost:5432/app_test go test ./...
//	OUTBOXTEST_DATABASE='mysql://root@tcp(localhost:3306)/test' go test ./...
//
// Plugin installs the application's own outbox.Plugin (a TableName, a
// Registry), AutoMigrate creates its tables, GormConfig sets its
// gorm.Config.
//
// SQLite runs on gorm.io/driver/sqlite (mattn/go-sqlite3, cgo) in a build
// with cgo, and on the pure-Go github.com/ncruces/go-sqlite3/gormlite with
// CGO_ENABLED=0: no driver files of your own. Both drivers register the
// database/sql name "sqlite3", so a test binary with both panics at start:
// an application on the pure-Go driver that builds its tests with cgo adds
// -tags outbox_purego, which makes outboxtest use that driver too.
//
// # What a unit of work emitted
//
//	func TestPlaceOrder(t *testing.T) {
//		db := outboxtest.DB(t, outboxtest.AutoMigrate(&Order{}))
//		placeOrder(db, cart) // the code under test
//
//		env := outboxtest.RequireEmitted(t, db, outbox.Event{
//			Type:        "order.created",
//			AggregateID: "42",
//			Payload:     map[string]any{"total": 500, "currency": "EUR"},
//		})
//		// env is the *outbox.Envelope handlers will receive: assert more on it.
//	}
//
// An expected outbox.Event matches on its non-zero fields only (see Like):
// strings and numbers are equal, Payload is compared as JSON (key order,
// spacing and number spelling do not matter), Headers are a subset, so
// that the trace headers Emit adds do not get in the way.
//
//   - RequireEmitted: exactly one event matches; it is returned.
//   - RequireNotEmitted: none matches (outbox.Event{} matches every event).
//   - RequireEmittedMany: the events of the expected types are exactly the
//     expected ones, in emission order.
//   - Emitted: the envelopes the filters keep, oldest first, for
//     assertions of your own.
//
// Filters narrow any of them: Type, Aggregate, Status (by default events
// are seen in every state, published ones included), Since (only what was
// emitted after Mark), PayloadSubset (the payload contains a JSON value),
// PayloadWhere (a predicate on the decoded payload), Where (a predicate on
// the envelope) and Like.
//
// A failed assertion stops the test (Errorf, then FailNow) with a message
// that says what was expected and lists what was emitted instead, each
// event with its type, id, aggregate, key, state and the start of its
// payload, and what differs: for a payload, the first path that does
// ("payload.lines[0].qty is 2, want 3"). Long payloads are cut, and only
// the newest events are listed.
//
// # Transactions
//
// The assertions read through the *gorm.DB they are given: pass the tx of
// db.Transaction and they see the events that transaction wrote and has not
// committed yet. A test that runs in a transaction and rolls it back at the
// end can therefore assert on its events, and leaves nothing behind.
//
// # Running the handlers
//
//	store, _ := idempotency.NewStore(db) // its table: migrated by DB
//	mux := inproc.NewMux(store)
//	mux.Handle("order.created", "send-receipt", sendReceipt)
//
//	placeOrder(db, cart)
//	res := outboxtest.Drain(t, db, mux) // returns when nothing is left to deliver
//
// Drain runs a relay's RunOnce until a batch claims nothing: one delivery at
// a time in claim order (so handlers run in a deterministic order), failed
// events retried at once (zero backoff) until published or dead, and the
// events that handlers emit are delivered too. It fails the test (with
// Errorf, so that the test goes on) listing each event it could not
// deliver with its state and last error, unless AllowFailures is given;
// StopOnFailure stops at the first failure instead of retrying. Any relay.Publisher works in
// place of the Mux, as do relay options (RelayOptions), such as
// relay.WithMaxAttempts.
//
// Events not due yet (Event.AvailableAt in the future, a retry's backoff,
// a snooze) are left alone, as a relay would leave them; DeliverDelayed
// makes them due first. Drain is bounded: it runs at most MaxBatches
// batches (DefaultMaxBatches), so a handler that never succeeds and never
// gives up fails the test instead of hanging it.
//
// Drain needs the *gorm.DB itself, not a transaction: a relay's claims and
// completions commit on their own, so commit the unit of work first.
//
// # Databases and tables
//
// Everything works the same on PostgreSQL, MySQL/MariaDB and SQLite, on
// the table of the outbox.Plugin installed on db (Plugin.TableName). The
// assertions read the whole outbox table at each call: they are meant for
// test databases, not for production ones.
//
// # Testing helpers of your own
//
// The helpers other than DB take a TB, which every testing.TB satisfies
// (DB takes a testing.TB: it needs Cleanup, TempDir and Skip); a fake TB that
// records Errorf and FailNow lets you test helpers built on this package,
// including their failure messages. The helpers return right after
// FailNow, so a fake whose FailNow returns sees no further effect.
package outboxtest
