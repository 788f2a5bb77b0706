package main

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// deadReason is what the consumers' handlers refuse with: control
// characters that the text output escapes and --json keeps.
const deadReason = "no such customer\x1b[2J\nforged line \u202e"

// refuser is a consumer's handler that refuses every event for good until
// it is fixed, then counts them.
type refuser struct {
	fixed   atomic.Bool
	mu      sync.Mutex
	handled map[string]int
}

func (r *refuser) handler() consume.Handler {
	return consume.HandlerFunc(func(_ context.Context, e *outbox.Envelope) error {
		if !r.fixed.Load() {
			return outbox.Permanent(errors.New(deadReason))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.handled == nil {
			r.handled = map[string]int{}
		}
		r.handled[e.ID]++
		return nil
	})
}

func (r *refuser) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handled[id]
}

// deadCase is an event a consumer put in its dead letter, and how the CLI
// names that dead letter.
type deadCase struct {
	flag string // the --dead-letters value ("" when env names it)
	env  []string
	name string // the dead letter's label
	// missing is a message id of the adapter's form that is not there.
	missing string
	// reason is in the dead message's reason: the handler's error whole,
	// control characters and all (NATS headers hold none: part of it;
	// RabbitMQ's x-death says "rejected").
	reason string
	// deliveries is the dead message's count (RabbitMQ's has none).
	deliveries int
}

// args are the arguments naming the dead letter.
func (d deadCase) args() []string {
	if d.flag == "" {
		return nil
	}
	return []string{"--dead-letters", d.flag}
}

// publishDead publishes an event of the id and waits until it is in the
// dead letter, through the CLI.
func publishDead(t *testing.T, pub relay.Publisher, e *outbox.Envelope, u string, d deadCase) {
	t.Helper()
	must(t, pub.Publish(t.Context(), e))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, ok := findDead(t, deadListOf(t, u, d), e.ID); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %s not in the dead letter %s", e.ID, d.name)
		}
	}
}

// deadListOf runs dead list --json with the dead letter and returns its
// page.
func deadListOf(t *testing.T, u string, d deadCase, more ...string) deadLetterJSON {
	t.Helper()
	args := append(append([]string{"dead", "list", "--json", "--limit", "1000"}, d.args()...), more...)
	out := decodeJSON[deadListJSON](t, cmdEnv(t, append([]string{"OUTBOX_DB=" + u}, d.env...), args...).ok(t).stdout)
	if len(out.DeadLetters) != 1 || out.DeadLetters[0].Name != d.name || !out.DeadLetters[0].Replayable || out.DeadLetters[0].Error != "" {
		t.Fatalf("dead list --json: dead letters %+v, want %s's, replayable", out.DeadLetters, d.name)
	}
	return out.DeadLetters[0]
}

func findDead(t *testing.T, page deadLetterJSON, eventID string) (deadMessageJSON, bool) {
	t.Helper()
	for _, m := range page.Messages {
		if m.EventID == eventID {
			return m, true
		}
	}
	return deadMessageJSON{}, false
}

// checkDeadLetter lists the dead event with the CLI (text and JSON),
// replays it (refused without --yes, then with an id that is not there),
// checks that the consumer handles it again and that it left the dead
// letter.
func checkDeadLetter(t *testing.T, u string, d deadCase, r *refuser, e *outbox.Envelope) {
	t.Helper()
	env := append([]string{"OUTBOX_DB=" + u}, d.env...)
	m, _ := findDead(t, deadListOf(t, u, d), e.ID)
	if m.Type != e.Type || m.Source == "" || m.DeadAt == nil || time.Since(*m.DeadAt) > 10*time.Minute ||
		!strings.Contains(m.Reason, d.reason) || m.Deliveries != d.deliveries {
		t.Errorf("dead message %+v", m)
	}
	text := cmdEnv(t, env, append([]string{"dead", "list", "--wide"}, d.args()...)...).ok(t).stdout
	for _, want := range []string{"dead letters of " + d.name + ":", "EVENT ID  TYPE", cell(m.ID), e.ID, cell(m.Source), cell(m.Reason)} {
		if !strings.Contains(text, want) {
			t.Errorf("dead list prints no %q:\n%s", want, text)
		}
	}
	if d.reason == deadReason && !strings.Contains(text, `no such customer\x1b[2J\nforged line \u202e`) {
		t.Errorf("dead list --wide does not print the reason escaped:\n%s", text)
	}
	if c, ok := rawControl(text); ok {
		t.Errorf("dead list prints the raw control character %q", c)
	}

	replay := append([]string{"dead", "replay", "--message", m.ID, "--message", d.missing}, d.args()...)
	if r := cmdEnv(t, env, replay...); r.code != 1 || !strings.Contains(r.stderr, "1 of the 2 distinct message id(s) are in the dead letter "+d.name+"; nothing was changed") {
		t.Errorf("replay without --yes: exit %d, %s", r.code, r.stderr)
	}
	r.fixed.Store(true)
	out := cmdEnv(t, env, append(replay, "--yes")...).ok(t).stdout
	if want := "replayed 1 of the 2 distinct message id(s) of the dead letter " + d.name + "\n1 of the 2 distinct ids were not in it (any more) and were left alone\n"; out != want {
		t.Errorf("replay printed %q, want %q", out, want)
	}
	for deadline := time.Now().Add(30 * time.Second); r.count(e.ID) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("event %s not consumed again after its replay", e.ID)
		}
	}
	if _, ok := findDead(t, deadListOf(t, u, d), e.ID); ok {
		t.Errorf("event %s still listed in the dead letter after its replay", e.ID)
	}
	if got := decodeJSON[map[string]any](t, cmdEnv(t, env, append(replay, "--yes", "--json")...).ok(t).stdout); got["replayed"] != 0.0 || got["distinct_ids"] != 2.0 {
		t.Errorf("replaying again: %v, want none replayed", got)
	}
}

// deadEnvelope is an event of a test.
func deadEnvelope(id, topic string) *outbox.Envelope {
	return &outbox.Envelope{ID: id, Type: "order.created", Topic: topic, Attempt: 1, Payload: []byte(`{"id":"` + id + `"}`), CreatedAt: time.Now().UTC()}
}

// withQuery returns the URL with the query parameters set.
func withQuery(t *testing.T, raw string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	must(t, err)
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// cliEnvDB is a migrated SQLite database for a dead-letter test.
func cliEnvDB(t *testing.T) string {
	t.Helper()
	u, db := cliDB(t, testenv.SQLite)
	must(t, outbox.Migrate(db))
	return u
}

// A broker that cannot be reached is an error line for its dead letter
// (exit status 1), naming it without its password, after the outbox's
// dead events and the other dead letters are listed.
func TestDeadLettersUnreachable(t *testing.T) {
	u := cliEnvDB(t)
	const password = "Secr3t-Passw0rd"
	down := "amqp://ops:" + password + "@" + freeAddr(t) + "/?queue=orders.dead"
	down2 := "kafka://" + freeAddr(t) + "?topic=orders.dead"
	r := cmd(t, u, "dead", "list", "--timeout", "3s", "--dead-letters", down, "--dead-letters", "k="+down2)
	if r.code != 1 || !strings.Contains(r.stderr, "dead letters amqp:orders.dead: connecting to amqp://") ||
		!strings.Contains(r.stderr, "dead letters k: ") || !strings.Contains(r.stdout, "ID  EVENT ID  TYPE  ATTEMPTS") ||
		strings.Count(r.stdout, "not read: the error is on stderr") != 2 {
		t.Errorf("dead list with brokers that are down: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	j := cmdEnv(t, []string{"OUTBOX_DB=" + u, deadLettersEnv + "=" + down}, "dead", "list", "--json", "--timeout", "3s")
	out := decodeJSON[deadListJSON](t, j.stdout)
	if j.code != 1 || len(out.DeadLetters) != 1 || out.DeadLetters[0].Error == "" || len(out.DeadLetters[0].Messages) != 0 {
		t.Errorf("dead list --json with a broker that is down: exit %d, %+v", j.code, out)
	}
	for _, s := range []string{r.stdout, r.stderr, j.stdout, j.stderr} {
		if strings.Contains(s, password) {
			t.Errorf("the password was printed:\n%s", s)
		}
	}
}

// Bad dead-letter URLs and flags are usage errors that say what is wrong,
// without the password.
func TestDeadLettersBadURLs(t *testing.T) {
	u := cliEnvDB(t)
	const password = "Secr3t-Passw0rd"
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"dead", "list", "--dead-letters", "http://ops:" + password + "@h:80/?stream=x"}, "", "unknown scheme http"},
		{[]string{"dead", "list", "--dead-letters", "redis://:" + password + "@h:6379/0"}, "", "no stream: add ?stream=NAME"},
		{[]string{"dead", "list", "--dead-letters", "redis://:" + password + "@h:6379/0?stream=x&bogus=1"}, "", "unexpected option: bogus"},
		{[]string{"dead", "list", "--dead-letters", "amqp://ops:" + password + "@h:5672/?queue=q&qeue=r"}, "", "unknown parameter qeue"},
		{[]string{"dead", "list", "--dead-letters", "kafka://h?topic=x"}, "", "want host:port"},
		{[]string{"dead", "list", "--dead-letters", "kafka://h:9092?topic=a%20b"}, "", "the topic must be"},
		{[]string{"dead", "list", "--dead-letters", "nats://" + password + "@h:4222"}, "", "no stream"},
		{[]string{"dead", "list", "--dead-letters", "not a url"}, "", "is not a URL"},
		{[]string{"dead", "list", "--dead-letters", "redis://h:1/0?stream=x", "--dead-letters", "redis://g:1/0?stream=x"}, "", "two dead letters named redis:x: label them"},
		{[]string{"dead", "list", "--dead-letters", "a\x1b=redis://h:1/0?stream=x"}, "", `the name a\x1b holds a control character`},
		{[]string{"dead", "list"}, "asynq://:" + password + "@h:6379/0?queue=q nats://h:4222?stream=a.b", "the stream must be"},
		{[]string{"dead", "list", "--dead-letters-after", "x=1"}, "", "no dead letter named x"},
		{[]string{"dead", "replay", "--message", "1-0", "--yes"}, "", "--message needs the dead letter it is in"},
		{[]string{"dead", "replay", "--message", "1-0", "--id", "e"}, "redis://h:1/0?stream=x", "one or the other"},
		{[]string{"dead", "replay", "--message", "1-0"}, "redis://h:1/0?stream=x redis://h:1/0?stream=y", "--from NAME"},
		{[]string{"dead", "replay", "--id", "e", "--dead-letters", "redis://h:1/0?stream=x"}, "", "name the dead letter of --message"},
		{[]string{"admin", "--dead-letters", "amqps://ops:" + password + "@h:5671/"}, "", "no queue: add ?queue=NAME"},
	} {
		r := cmdEnv(t, []string{"OUTBOX_DB=" + u, deadLettersEnv + "=" + tc.env}, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stdout+r.stderr, password) {
			t.Errorf("outbox %q (%s=%q): exit %d, %s; want 2 and %q", tc.args, deadLettersEnv, tc.env, r.code, r.stderr, tc.want)
		}
	}
}

// natsURLOf is the test's NATS server, skipping (or failing) without it.
func natsURLOf(t *testing.T) string {
	t.Helper()
	return brokerEnv(t, "OUTBOX_NATS_URL", "nats://127.0.0.1:4222")
}

// amqpURLOf is the test's RabbitMQ, skipping (or failing) without it.
func amqpURLOf(t *testing.T) string {
	t.Helper()
	return brokerEnv(t, "OUTBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
}
