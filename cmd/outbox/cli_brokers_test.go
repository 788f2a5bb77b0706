package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// brokerEnv returns the variable env, skipping the test (failing it with
// OUTBOX_REQUIRE_SERVICES=1) without it.
func brokerEnv(t *testing.T, env, example string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		testenv.Unavailable(t, env, example)
	}
	return v
}

// emitTopic emits events of the ids with the topic ("": none).
func emitTopic(t *testing.T, db *gorm.DB, topic string, ids ...string) {
	t.Helper()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		for _, id := range ids {
			if err := outbox.Emit(tx, outbox.Event{ID: id, Type: "cli.test", Topic: topic, Payload: map[string]string{"id": id}}); err != nil {
				return err
			}
		}
		return nil
	}))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// untouched checks that the event is pending with no attempt spent.
func untouched(t *testing.T, db *gorm.DB, id string) {
	t.Helper()
	var e outbox.OutboxEvent
	must(t, db.Where("event_id = ?", id).First(&e).Error)
	if e.Status != outbox.StatusPending || e.Attempts != 0 {
		t.Errorf("event %s is %s after %d attempts, want pending after none", id, e.Status, e.Attempts)
	}
}

// waitPublished scrapes the relay's metrics until it counts n published
// events, and returns the last scrape.
func waitPublished(t *testing.T, addr string, n float64) string {
	t.Helper()
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if body = scrape(t, "http://"+addr+"/metrics"); sumOf(body, "outbox_events_published_total") == n {
			return body
		}
	}
	t.Fatalf("the metrics count %v published events, want %v:\n%s", sumOf(body, "outbox_events_published_total"), n, body)
	return ""
}

// publisherOf waits for the relay's heartbeat and returns its publisher's
// description.
func publisherOf(t *testing.T, u, id string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, r := range decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout).Relays {
			if r.ID == id {
				return r.Publisher
			}
		}
	}
	t.Fatalf("no heartbeat of relay %s", id)
	return ""
}

// amqpGet takes n messages from the queue, waiting up to 30 s for them.
func amqpGet(t *testing.T, ch *amqp.Channel, queue string, n int) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(got) < n; {
		d, ok, err := ch.Get(queue, true)
		must(t, err)
		if ok {
			got = append(got, d)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %d messages, want %d", queue, len(got), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return got
}

// amqpIDs checks each message against its envelope and returns the ids.
func amqpIDs(t *testing.T, ds []amqp.Delivery) []string {
	t.Helper()
	var ids []string
	for _, d := range ds {
		e, err := outbox.DecodeEnvelope(d.Body)
		if err != nil || e.ID != d.MessageId || d.DeliveryMode != amqp.Persistent || d.Type != "cli.test" {
			t.Errorf("message %s (%v, mode %d, type %q): envelope %+v", d.MessageId, err, d.DeliveryMode, d.Type, e)
		}
		ids = append(ids, d.MessageId)
	}
	slices.Sort(ids)
	return ids
}

// relay --to amqp publishes to RabbitMQ through outboxamqp, with its
// metrics and its description; --exchange routes by Topic; a broker that
// refuses the connection spends no attempt and its password is never
// printed.
func TestRelayToAMQP(t *testing.T) {
	brokerURL := brokerEnv(t, "OUTBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp.Dial(brokerURL)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	queue, routed, exchange := testenv.Name("cli-amqp"), testenv.Name("cli-amqp-routed"), testenv.Name("cli-amqp-x")
	for _, q := range []string{queue, routed} {
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		must(t, err)
		t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	}
	must(t, ch.ExchangeDeclare(exchange, "direct", false, false, false, false, nil))
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	must(t, ch.QueueBind(routed, "orders", exchange, false, nil))

	u, db := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	want := ids("amqp", 20)
	emitTopic(t, db, queue, want...)
	addr := freeAddr(t)
	_, stderr, stop := startRelay(t, u, "--to", "amqp", "--amqp-url", brokerURL, "--metrics-addr", addr, "--worker-id", "cli-amqp")
	if got := amqpIDs(t, amqpGet(t, ch, queue, len(want))); !slices.Equal(got, want) {
		t.Errorf("queue %s holds %v, want %v", queue, got, want)
	}
	waitPublished(t, addr, 20)
	uri, err := amqp.ParseURI(brokerURL)
	must(t, err)
	if p, w := publisherOf(t, u, "cli-amqp"), fmt.Sprintf("amqp default exchange, queue = the event's Topic (or Type) on %s:%d", uri.Host, uri.Port); !strings.HasPrefix(p, w) {
		t.Errorf("stats describes the relay's publisher as %q, want %q", p, w)
	}
	stop()
	if t.Failed() {
		t.Logf("relay stderr:\n%s", stderr)
	}

	emitTopic(t, db, "orders", "routed-1", "routed-2")
	r := cmd(t, u, "dispatch-once", "--to", "amqp", "--amqp-url", brokerURL, "--exchange", exchange, "--json").ok(t)
	if res := decodeJSON[map[string]int](t, r.stdout); res["published"] != 2 {
		t.Errorf("dispatch-once --exchange: %v", res)
	}
	if got := amqpIDs(t, amqpGet(t, ch, routed, 2)); !slices.Equal(got, []string{"routed-1", "routed-2"}) {
		t.Errorf("queue %s (bound to %s by orders) holds %v", routed, exchange, got)
	}

	const password = "Wr0ng-Passw0rd"
	uri.Password = password
	emitTopic(t, db, queue, "refused")
	r = cmd(t, u, "dispatch-once", "--to", "amqp", "--amqp-url", uri.String(), "--json", "--log-level", "debug").ok(t)
	if res := decodeJSON[map[string]int](t, r.stdout); res["released"] != 1 {
		t.Errorf("dispatch-once to a broker that refuses the login: %v, want the event released", res)
	}
	untouched(t, db, "refused")
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Errorf("the password was printed:\n%s%s", r.stdout, r.stderr)
	}
	if r := cmd(t, u, "relay", "--to", "amqp"); r.code != 2 || !strings.Contains(r.stderr, "--to amqp needs --amqp-url (or OUTBOX_AMQP)") {
		t.Errorf("relay --to amqp without a URL: exit %d, %s", r.code, r.stderr)
	}
}

// natsStream creates a stream capturing "<name>.>", deleted when t ends.
func natsStream(t *testing.T, js jetstream.JetStream) (jetstream.Stream, string) {
	t.Helper()
	name := strings.ReplaceAll(testenv.Name("cli-nats"), "-", "_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Duplicates: time.Minute})
	must(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return s, name
}

// natsMessages waits until the stream holds n messages and returns each
// message's subject by its Nats-Msg-Id.
func natsMessages(t *testing.T, s jetstream.Stream, n int) map[string]string {
	t.Helper()
	ctx := t.Context()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := s.Info(ctx)
		must(t, err)
		if info.State.Msgs >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s: %d messages, want %d", info.Config.Name, info.State.Msgs, n)
		}
	}
	got := map[string]string{}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		m, err := s.GetMsg(ctx, seq)
		must(t, err)
		e, err := outbox.DecodeEnvelope(m.Data)
		if id := m.Header.Get("Nats-Msg-Id"); err != nil || e.ID != id {
			t.Errorf("message %d: Nats-Msg-Id %q, envelope %+v (%v)", seq, id, e, err)
		}
		got[e.ID] = m.Subject
	}
	return got
}

// relay --to nats publishes to JetStream through outboxnats: the Topic
// names the subject after --subject-prefix, --subject is the subject of
// events without one; with metrics and a description. A server that is
// down spends no attempt, and a token in the URL is never printed.
func TestRelayToNATS(t *testing.T) {
	natsURL := brokerEnv(t, "OUTBOX_NATS_URL", "nats://127.0.0.1:4222")
	nc, err := nats.Connect(natsURL)
	must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(t, err)
	stream, name := natsStream(t, js)

	u, db := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	topical, plain := ids("topic", 10), ids("plain", 5)
	emitTopic(t, db, "orders", topical...)
	emitTopic(t, db, "", plain...)
	addr := freeAddr(t)
	_, stderr, stop := startRelay(t, u, "--to", "nats", "--nats-url", natsURL, "--subject-prefix", name+".", "--subject", "fallback",
		"--metrics-addr", addr, "--worker-id", "cli-nats")
	got := natsMessages(t, stream, 15)
	for _, id := range topical {
		if got[id] != name+".orders" {
			t.Errorf("event %s on subject %q, want %s.orders", id, got[id], name)
		}
	}
	for _, id := range plain {
		if got[id] != name+".fallback" {
			t.Errorf("event %s on subject %q, want %s.fallback", id, got[id], name)
		}
	}
	waitPublished(t, addr, 15)
	if p, w := publisherOf(t, u, "cli-nats"), "nats jetstream subject "+name+".<Topic> (default "+name+".fallback) on nats://"; !strings.HasPrefix(p, w) {
		t.Errorf("stats describes the relay's publisher as %q, want %q…", p, w)
	}
	stop()
	if t.Failed() {
		t.Logf("relay stderr:\n%s", stderr)
	}

	const token = "s3cret-t0ken"
	emitTopic(t, db, "orders", "down")
	r := cmd(t, u, "dispatch-once", "--to", "nats", "--nats-url", "nats://"+token+"@"+freeAddr(t), "--json", "--log-level", "debug").ok(t)
	if res := decodeJSON[map[string]int](t, r.stdout); res["released"] != 1 {
		t.Errorf("dispatch-once to a server that is down: %v, want the event released", res)
	}
	untouched(t, db, "down")
	if strings.Contains(r.stdout+r.stderr, token) {
		t.Errorf("the token was printed:\n%s%s", r.stdout, r.stderr)
	}
	if r := cmd(t, u, "relay", "--to", "nats", "--nats-url", "http://"+token+"@host:4222"); r.code != 2 || strings.Contains(r.stderr, token) ||
		!strings.Contains(r.stderr, "not a valid nats URL") {
		t.Errorf("relay --to nats with an http URL: exit %d, %s", r.code, r.stderr)
	}
}
