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
//     payloads.
//   - Event: every field, headers, the trace id, the last error in full,
//     the lease, and the payload (pretty-printed JSON) only when asked,
//     through WithRedactor if set.
//   - Blocked keys: partition keys whose head event failed, with the
//     number of events waiting behind it and its last error.
//
// # Actions
//
// Replay a dead event, replay every dead event matching the list's
// filter, redeliver a published event, purge published events older than
// an age, and skip a blocked key's head (mark it dead so that the key
// moves on). Each is a POST answered by a confirmation page that says
// what would change (how many events for a bulk replay); only submitting
// that page's form changes anything, and the result page says what did.
// The operations are relay.Inspector's, with its guarantees: an event a
// relay holds is never touched.
//
// # Safety
//
// WithReadOnly refuses every method but GET and HEAD. POSTs from another
// origin are refused (net/http's CrossOriginProtection; WithTrustedOrigin
// adds origins). WithMiddleware wraps the handler for authentication;
// BasicAuth is one. Pages are not cached and may not be framed, and their
// Content-Security-Policy allows the page's own assets only. Payload bytes
// appear only on an event's page when asked, never in lists or logs. All
// SQL is bound; parameters are validated and a bad one is a 400 page
// saying which and why.
//
// The pages are html/template with embedded CSS and a few lines of
// JavaScript (clickable rows, refreshing the overview); everything works
// without JavaScript. No CDN, no build step.
package admin
