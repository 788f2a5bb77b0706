// Package consumetest is the conformance suite of consume.Transport: one
// Exercise that every broker adapter runs against its real server, so
// that a handler behaves the same on each. Adding a broker is writing its
// Transport and publisher, and passing it.
//
// The suite publishes events through the outbox and a relay (on a SQLite
// database of the test's own) to the adapter's publisher, and consumes
// them with the adapter's consumers. Its cases:
//
//   - EffectsOnce: two consumers with an idempotent handler, one effect
//     per event, each message going to one of them;
//   - DuplicatesAtOnce: every event published twice, consumed by two
//     consumers at once through the idempotency middleware, one effect;
//   - RelayKilledMidBatch: a relay SIGKILLed with half a batch in the
//     broker that it never recorded; the next one publishes it again; one
//     effect per event (the test binary runs again as that relay);
//   - BrokerOutage: the broker cut (Harness.Outage) under the relay and a
//     consumer: nothing lost, no relay attempt spent, nothing dead;
//   - DependencyDown: a handler returning outbox.Unavailable: the consumer
//     pauses, nothing dead, those runs not counted;
//   - KeyOrder: a key's events one at a time and in commit order (across
//     two consumers with some failing once, where the broker keeps order
//     across consumers; else within one consumer running four at once);
//   - PoisonDeadLettered: a message refused for good goes to the dead
//     letter, once, and its key goes on;
//   - MaxDeliveries: a handler that always fails runs WithMaxDeliveries
//     times, its Delivery counting, then the message is dead;
//   - TypedAndRegistry: typed handlers with a registry; unknown events and
//     payloads that do not decode are dead at once (ErrBadPayload);
//   - GracefulStop: a consumer stopped mid-batch and run again: nothing
//     lost, nothing counted twice.
//
// Use it from a test of its own:
//
//	func TestConformance(t *testing.T) {
//		consumetest.Exercise(t, consumetest.Harness{
//			NewPublisher: …, NewDest: …, NewConsumer: …, DeadLetters: …,
//			Outage: …, // a proxy cut, when the test can make one
//		})
//	}
package consumetest
