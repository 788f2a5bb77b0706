package main

import (
	"bytes"
	"strings"
	"testing"
)

// Each URL form names its dead letter, its default label and what its
// client library is given: our parameters removed, asynq's scheme Redis's.
func TestParseDeadLetters(t *testing.T) {
	for _, tc := range []struct{ in, name, kind, target, subject, lib string }{
		{"redis://:pw@h:6379/2?stream=orders.dead&dial_timeout=3s", "redis:orders.dead", "redis", "orders.dead", "", "redis://:pw@h:6379/2?dial_timeout=3s"},
		{"rediss://h:6380/0?stream=s", "redis:s", "redis", "s", "", "rediss://h:6380/0"},
		{"asynq://h:6379/0?queue=orders", "asynq:orders", "asynq", "orders", "", "redis://h:6379/0"},
		{"asynqs://h:6379", "asynq:default", "asynq", "default", "", "rediss://h:6379"},
		{"billing=amqp://u:p@h:5672/shop?queue=billing.dead&heartbeat=5", "billing", "amqp", "billing.dead", "", "amqp://u:p@h:5672/shop?heartbeat=5"},
		{"NATS://tok@a:4222,b:4222?stream=DEAD&subject=orders.dead", "nats:DEAD/orders.dead", "nats", "DEAD", "orders.dead", "nats://tok@a:4222,b:4222"},
		{"kafka://a:9092,b:9092?topic=orders.dead", "kafka:orders.dead", "kafka", "orders.dead", "", "kafka://a:9092,b:9092"},
		{"a name=kafka://a:9092?topic=t", "a name", "kafka", "t", "", "kafka://a:9092"},
	} {
		c := newCLI(nil, &bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" })
		ds, err := parseDeadLetters(c, []string{tc.in})
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		d := ds[0]
		if d.name != tc.name || d.kind != tc.kind || d.target != tc.target || d.subject != tc.subject || d.lib != tc.lib {
			t.Errorf("%s: %q %s %q %q %q; want %q %s %q %q %q", tc.in, d.name, d.kind, d.target, d.subject, d.lib, tc.name, tc.kind, tc.target, tc.subject, tc.lib)
		}
	}
	d, err := parseDeadLetter(newCLI(nil, &bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" }), "nats://tok@a:4222,b:4222?stream=D")
	if err != nil || natsServers(d.u) != "nats://tok@a:4222,nats://tok@b:4222" {
		t.Errorf("the NATS servers of %v: %q", err, natsServers(d.u))
	}
}

// The passwords of dead-letter URLs, labelled or not, given as flags or in
// the environment, are scrubbed from stderr before any is parsed.
func TestDeadLetterPasswordsScrubbed(t *testing.T) {
	env := map[string]string{deadLettersEnv: "x=amqp://u:env-secret@h:5672/?queue=q nats://env-token@h:4222?stream=s"}
	args := []string{"dead", "list", "--dead-letters", "b=redis://:flag-secret@h:6379/0?stream=s", "--dead-letters=kafka=amqp://u:eq-secret@h/?queue=q"}
	var stderr bytes.Buffer
	c := newCLI(args, &bytes.Buffer{}, &stderr, func(k string) string { return env[k] })
	c.stderr.Write([]byte("env-secret flag-secret eq-secret\n"))
	if _, err := parseDeadLetters(c, deadLetterValues(c, nil)); err != nil {
		t.Fatal(err)
	}
	c.stderr.Write([]byte("env-token\n"))
	if got := stderr.String(); got != "xxxxx xxxxx xxxxx\nxxxxx\n" {
		t.Errorf("stderr %q", got)
	}
}

// Any --dead-letters value parses or is refused without a panic, and a
// refusal never holds the URL's password.
func FuzzDeadLetterURL(f *testing.F) {
	for _, s := range []string{
		"redis://:%s@h:6379/0?stream=s", "asynq://:%s@h:6379/0?queue=%s", "amqp://u:%s@h:5672/v?queue=q&bogus=1",
		"nats://%s@a:4222,b?stream=S", "kafka://u:%s@a:9092?topic=t", "n=amqps://u:%s@h:5671/%2f?queue=", "redis://:%s@h:6379/x?stream=s",
		"redis://:%s@[::1:6379/0?stream=s", "x\x1b=redis://:%s@h/0?stream=s\x00", "nats://:%s@h:4222?stream=a.b",
	} {
		f.Add(s, "Secr3t-pw")
	}
	f.Fuzz(func(t *testing.T, form, password string) {
		raw := strings.ReplaceAll(form, "%s", password)
		c := newCLI([]string{"--dead-letters", raw}, &bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" })
		_, err := parseDeadLetters(c, []string{raw})
		if err == nil || len(password) < minSecretLen || !strings.Contains(form, ":%s@") || strings.ContainsAny(password, "@/?#:%,") {
			return
		}
		if msg := c.secrets.scrub(err.Error()); strings.Contains(msg, password) && !strings.Contains(strings.ReplaceAll(raw, ":"+password+"@", ""), password) {
			t.Fatalf("%q: the error holds the password: %s", raw, msg)
		}
	})
}
