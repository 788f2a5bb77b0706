// Package adapterkit holds what the broker adapters (package inproc and
// the modules under adapters/) share, so that each rule is written once:
//
//   - Outage: the "is the broker down" rule documented on relay.Publisher
//     (a transport failure, a broker that cannot take the message now, or
//     a call whose context ended before the broker answered), with the
//     broker's own checks plugged in; a publisher decides it on the
//     broker's error and marks its own, wrapped, outbox.Unavailable;
//   - CheckHandlerName: the rule for the names of idempotent handlers;
//   - Call: panic recovery around a handler;
//   - RetryStep, NextPause and Sleep: the consumers' backoff;
//   - Process, the consumer span around a handler (its attribute names
//     are those of package internal/semconv);
//   - CheckEnvelope: an envelope upcast and checked by a registry;
//   - Collect, Every and EncodeEnvelope: the receive loop, the keepers'
//     ticker and the envelope's encoding that transports and publishers
//     share;
//   - PublisherConfig: what every publisher's configuration holds (the
//     source of events that have none, the logger, the option errors),
//     set by each publisher's WithSource and WithLogger.
//
// The consumer's policy (handlers, typed handlers, idempotency, outcomes)
// is package consume's, public; this package holds what only the
// adapters' own code needs.
//
// Options record their errors with package internal/optionerr, which the
// relay and the idempotency store share. It is internal: nothing here is
// part of the public API.
package adapterkit
