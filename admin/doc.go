// Package admin is an embeddable admin page for a gorm-outbox table: see
// whether anything is stuck, why, and repair it, in a browser.
//
//	h, err := admin.NewHandler(db,
//		admin.WithPrefix("/outbox"),
//		admin.WithMiddleware(admin.BasicAuth(user, password)))
//	mux.Handle("/outbox/", h)
//
// The CLI serves it too: outbox admin --db … --listen 127.0.0.1:8080.
//
// # Pages
//
//   - Overview: events per status, how long the oldest deliverable pending
//     event has waited, the relays (live or stale, host, pid, last beat,
//     totals, where they publish), events published per minute over the
//     last hour with their average lag (an SVG drawn on the server), and
//     what needs attention: dead events, blocked keys, stale relays.
//   - Events: filter by status, type, topic, partition key, aggregate type
//     and id, event id, tenant and creation time; newest or oldest first;
//     cursor paging on the primary key (never OFFSET). Lists never carry
//     payloads. What each filter reads is said under "Large tables".
//   - Event: every field, headers, the trace id, the last error in full,
//     the lease, the attempt log (relay.WithAttemptLog: each claim's
//     outcome, relay, duration, receipt and error; the receipt is where
//     the publisher says a published event went, relay.SetReceipt, such as
//     a Kafka topic/partition@offset), and the payload (pretty-printed
//     JSON) only when asked, through WithRedactor if set.
//   - Blocked keys: partition keys whose head event failed, with the
//     number of events waiting behind it and its last error.
//   - Consumers: the dead letters of the consumers given to
//     WithDeadLetters (a broker adapter's consume.DeadLetterReader), a
//     page at a time. A message a consumer gave up on leaves its outbox
//     event published; the overview names every dead letter that holds
//     messages (or cannot be read) under what needs attention, so that
//     "nothing" there means nothing anywhere.
//
// # Large tables
//
// The page reads the outbox's partial indexes, so that it stays fast on a
// table holding millions of published events:
//
//   - Counts per status are exact for every status but published, each
//     read from the index that holds it. On PostgreSQL more than 10,000
//     published events are not counted but estimated (pg_class.reltuples,
//     refreshed by autovacuum), and the overview labels the count
//     "estimate"; elsewhere they are counted.
//   - The throughput chart counts each minute's publications from the
//     published index, exactly up to 20,000 a minute (a busier minute is
//     estimated from the rate of its first 20,000, marked ≈). An ended
//     minute is counted once and remembered by the handler, so that a
//     refresh reads the current minute's publications only; the lag is
//     the average of each minute's first 500.
//   - A status filter other than published, and a count of dead events,
//     read that status's index. The partition key filter with any status
//     lists the key's unfinished and dead events from the key and dead
//     indexes; a key's published events have no index (an index over
//     every row costs the relay an entry per event and state change), so
//     they are listed with status published, which walks the table.
//
// The aggregate type and id filter has no index on PostgreSQL: migration
// 0006 dropped it, as nothing on an event's way reads it, and the events
// page says that this filter scans the table there. An application that
// needs the lookup on a large table creates the index (CONCURRENTLY does
// not block writers):
//
//	CREATE INDEX CONCURRENTLY outbox_events_aggregate_idx
//	    ON outbox_events (aggregate_type, aggregate_id);
//
// MySQL/MariaDB and SQLite keep that index.
//
// # Actions
//
// Replay a dead event, replay every dead event matching the list's
// filter, redeliver a published event, purge published events older than
// an age, and skip a blocked key's head (mark it dead so that the key
// moves on), and replay a consumer's dead message (when its reader is a
// consume.DeadLetterReplayer: the message goes back to its consumers and
// leaves the dead letter; a message no longer there is left alone). Each
// is a POST answered by a confirmation page that says
// what would change (how many events for a bulk replay); only submitting
// that page's form changes anything, and the result page says what did.
// The operations are relay.Inspector's, with its guarantees: an event a
// relay holds is never touched.
//
// # Safety
//
// Only a request whose Host is a loopback address, localhost or a name
// given to WithAllowedHosts is answered; any other is refused (403)
// before anything else runs. A DNS rebinding (a page of the attacker's
// whose name then resolves to 127.0.0.1) otherwise reaches a page served
// on loopback as the attacker's own origin: same-origin checks pass, and
// loopback is the only protection a page without authentication has.
//
// The handler authenticates nobody by itself. Without WithMiddleware,
// anyone who reaches it reads payloads and repairs events: serve it on
// loopback only, or behind authentication, WithMiddleware (BasicAuth is
// one) or a proxy that authenticates and forwards an allowed Host
// (WithAllowedHosts("ops.example.com")). NewHandler logs a warning when
// it has no middleware.
//
// WithReadOnly refuses every method but GET and HEAD. Actions are POSTs
// only (any other method is 405, so that a proxy rule guarding POST
// guards them), and POSTs from another origin are refused (net/http's
// CrossOriginProtection; WithTrustedOrigin adds origins). A confirmation
// carries the state it showed (an event's status and claim version, a
// dead set's digest, a purge's cutoff instant), and the change checks it:
// what changed meanwhile is left alone, and a form submitted twice (a
// reloaded result page) changes nothing more. Every response, refusals
// included, is not cached and may not be framed, and its
// Content-Security-Policy allows the page's own assets only. Payload
// bytes appear only on an event's page when asked, never in lists or
// logs. All SQL is bound; every parameter (filters, ids, keys, cursors,
// ages, times) is checked before any statement (UTF-8, no NUL byte, the
// column's length, durations and times in range), and a bad one is a
// 400 page saying which and why.
//
// The pages are html/template with embedded CSS and a few lines of
// JavaScript (clickable rows, refreshing the overview); everything works
// without JavaScript. No CDN, no build step.
package admin
