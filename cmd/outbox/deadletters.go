package main

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// A consumer that gives up on a message puts it in its broker's dead
// letter and leaves the outbox row published: --dead-letters names those
// dead letters, so that dead list, dead replay and admin show them beside
// the outbox's dead events. Parsing a URL connects to nothing; each
// source connects when it is first read (deadletters_open.go).

// deadLettersEnv holds dead letters, whitespace-separated, when no
// --dead-letters flag is given.
const deadLettersEnv = "OUTBOX_DEAD_LETTERS"

// deadLettersHelp describes the forms --dead-letters takes.
const deadLettersHelp = `--dead-letters (repeatable; or $` + deadLettersEnv + `, whitespace-separated) names a
consumer's dead letter, [NAME=]URL, in one of these forms:
  redis://[:password@]host:6379/0?stream=orders.dead         (outboxredis WithDeadLetterStream; rediss:// for TLS)
  asynq://[:password@]host:6379/0?queue=orders               (asynq's archive, queue default "default"; asynqs:// for TLS)
  amqp://user:password@host:5672/vhost?queue=orders.dead     (RabbitMQ dead-letter queue; amqps:// for TLS)
  nats://[user:password@]host:4222[,host2:4222]?stream=DEAD[&subject=orders.dead]   (tls:// for TLS)
  kafka://host:9092[,host2:9092]?topic=orders.dead           (outboxkafka WithDeadLetterTopic)
NAME labels it (default scheme:name, e.g. redis:orders.dead). Each is connected to when
first read, within --timeout.`

// Bounds of a dead letter's label (the admin page's) and of the names and
// ids given with it.
const (
	maxDeadLetterName = 100
	maxDeadLetterArg  = 512
)

// deadLetterKind is what a URL scheme names.
type deadLetterKind struct {
	kind  string   // redis, asynq, amqp, nats or kafka
	param string   // the query parameter naming the dead letter
	extra []string // further parameters of ours; nil: the client library checks the rest
	// libParams says whether the client library takes the other query
	// parameters (go-redis, amqp091); otherwise they are refused.
	libParams bool
}

var deadLetterSchemes = map[string]deadLetterKind{
	"redis": {kind: "redis", param: "stream", libParams: true}, "rediss": {kind: "redis", param: "stream", libParams: true},
	"asynq": {kind: "asynq", param: "queue", libParams: true}, "asynqs": {kind: "asynq", param: "queue", libParams: true},
	"amqp": {kind: "amqp", param: "queue", libParams: true}, "amqps": {kind: "amqp", param: "queue", libParams: true},
	"nats": {kind: "nats", param: "stream", extra: []string{"subject"}}, "tls": {kind: "nats", param: "stream", extra: []string{"subject"}},
	"kafka": {kind: "kafka", param: "topic"},
}

// amqpParams are the query parameters amqp091's ParseURI reads (it
// ignores others, which would hide a typo).
var amqpParams = []string{"certfile", "keyfile", "cacertfile", "server_name_indication", "auth_mechanism", "heartbeat", "connection_timeout", "channel_max"}

// deadLetterURL is a parsed --dead-letters value.
type deadLetterURL struct {
	name  string // the label
	kind  string // redis, asynq, amqp, nats or kafka
	shown string // the URL, password masked
	u     *url.URL
	// target is the dead letter: the stream, queue or topic; subject is
	// NATS's subject filter.
	target, subject string
	// lib is the URL handed to the client library: our parameters
	// removed, the scheme the library's.
	lib string
}

// deadLetterValues returns the --dead-letters values, or those of the
// environment variable when none was given.
func deadLetterValues(c *cli, flags []string) []string {
	if len(flags) > 0 {
		return flags
	}
	return strings.Fields(c.getenv(deadLettersEnv))
}

// parseDeadLetters parses the values and registers their passwords; the
// names must differ.
func parseDeadLetters(c *cli, values []string) ([]*deadLetterURL, error) {
	var out []*deadLetterURL
	for _, v := range values {
		d, err := parseDeadLetter(c, v)
		if err != nil {
			return nil, err
		}
		for _, o := range out {
			if o.name == d.name {
				return nil, usagef("--dead-letters: two dead letters named %s: label them, NAME=URL", cell(d.name))
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// splitLabel splits NAME=URL (a '=' before "://").
func splitLabel(v string) (name, raw string, labelled bool) {
	i := strings.Index(v, "://")
	if i < 0 {
		return "", v, false
	}
	name, raw, labelled = strings.Cut(v[:i], "=")
	if !labelled {
		return "", v, false
	}
	return name, raw + v[i:], true
}

// parseDeadLetter parses one [NAME=]URL.
func parseDeadLetter(c *cli, v string) (*deadLetterURL, error) {
	name, raw, labelled := splitLabel(v)
	if !strings.Contains(raw, "://") { // not echoed: nothing says where a password would be
		return nil, usagef("--dead-letters: a value is not a URL: want [NAME=]scheme://host…, e.g. redis://host:6379/0?stream=orders.dead (see 'outbox help')")
	}
	c.secrets.addFrom(raw)
	shown := maskUserinfo(raw)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return nil, usagef("--dead-letters %s: not a valid URL%s: want e.g. redis://host:6379/0?stream=orders.dead (see 'outbox help')", shown, urlProblem(err))
	}
	kind, known := deadLetterSchemes[u.Scheme] // url.Parse lowers it
	if !known {
		return nil, usagef("--dead-letters %s: unknown scheme %s: want redis, rediss, asynq, asynqs, amqp, amqps, nats, tls or kafka", shown, cell(u.Scheme))
	}
	registerUserinfo(c, u)
	d := &deadLetterURL{kind: kind.kind, shown: shown, u: u}
	if err := d.takeParams(kind); err != nil {
		return nil, err
	}
	if err := d.checkLib(c); err != nil {
		return nil, err
	}
	if !labelled {
		name = d.defaultName()
	}
	if err := checkDeadLetterName(name); err != nil {
		return nil, usagef("--dead-letters %s: the name %v", shown, err)
	}
	d.name = name
	return d, nil
}

// registerUserinfo registers a URL's password, or its user when it has
// none (a NATS token), with the scrubber.
func registerUserinfo(c *cli, u *url.URL) {
	if pw, ok := u.User.Password(); ok {
		c.secrets.add(pw, url.PathEscape(pw), url.QueryEscape(pw))
	} else if u.User != nil {
		c.secrets.add(u.User.Username(), url.PathEscape(u.User.Username()))
	}
}

// takeParams reads the dead letter's parameters out of the query, checks
// the rest, and sets lib.
func (d *deadLetterURL) takeParams(k deadLetterKind) error {
	q := d.u.Query()
	d.target = q.Get(k.param)
	d.subject = q.Get("subject")
	if d.target == "" && d.kind == "asynq" {
		d.target = "default"
	}
	if d.target == "" {
		return usagef("--dead-letters %s: no %s: add ?%s=NAME", d.shown, k.param, k.param)
	}
	for _, p := range append([]string{k.param}, k.extra...) {
		if len(q[p]) > 1 {
			return usagef("--dead-letters %s: %s given twice", d.shown, p)
		}
		q.Del(p)
	}
	for p := range q {
		if !k.libParams || (d.kind == "amqp" && !slices.Contains(amqpParams, p)) {
			return usagef("--dead-letters %s: unknown parameter %s: want %s", d.shown, cell(p), strings.Join(append([]string{k.param}, k.extra...), ", "))
		}
	}
	if err := d.checkNames(); err != nil {
		return err
	}
	switch {
	case d.kind == "kafka" && d.u.User != nil:
		return usagef("--dead-letters %s: kafka URLs take no user or password", d.shown)
	case (d.kind == "kafka" || d.kind == "nats") && d.u.Path != "" && d.u.Path != "/":
		return usagef("--dead-letters %s: %s URLs take no path", d.shown, d.kind)
	}
	lib := *d.u
	lib.RawQuery = q.Encode()
	if s, ok := map[string]string{"asynq": "redis", "asynqs": "rediss"}[d.u.Scheme]; ok {
		lib.Scheme = s
	}
	d.lib = lib.String()
	return nil
}

var (
	kafkaTopicRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
	natsStreamRE = regexp.MustCompile(`^[^\s.*>/\\]{1,255}$`)
)

// checkNames checks the stream, queue, topic and subject before a broker
// sees them.
func (d *deadLetterURL) checkNames() error {
	bad := func(what, why string) error {
		return usagef("--dead-letters %s: the %s %s", d.shown, what, why)
	}
	for _, v := range []string{d.target, d.subject} {
		if err := checkDeadLetterText(v, maxDeadLetterArg); err != nil {
			return bad("name", err.Error())
		}
	}
	switch {
	case d.kind == "kafka" && !kafkaTopicRE.MatchString(d.target):
		return bad("topic", "must be 1 to 249 of the characters a-z A-Z 0-9 . _ -")
	case d.kind == "nats" && !natsStreamRE.MatchString(d.target):
		return bad("stream", "must be 1 to 255 characters without spaces, '.', '*', '>', '/' or '\\'")
	case d.kind == "nats" && strings.ContainsAny(d.subject, " \t"):
		return bad("subject", "holds a space")
	case d.kind == "amqp" && len(d.target) > 255:
		return bad("queue", "is longer than 255 bytes")
	}
	return nil
}

// defaultName is the label of an unlabelled dead letter: scheme:name.
func (d *deadLetterURL) defaultName() string {
	name := d.kind + ":" + d.target
	if d.kind == "nats" && d.subject != "" {
		name += "/" + d.subject
	}
	return name
}

// checkDeadLetterName checks a label as the admin page does, and more:
// no control character.
func checkDeadLetterName(name string) error {
	if name == "" {
		return fmt.Errorf("is empty")
	}
	return checkDeadLetterText(name, maxDeadLetterName)
}

// checkDeadLetterText checks a name or id given on the command line:
// UTF-8, no control character, at most max characters.
func checkDeadLetterText(s string, max int) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", cell(s))
	case strings.IndexFunc(s, isControl) >= 0:
		return fmt.Errorf("%s holds a control character", cell(s))
	case utf8.RuneCountInString(s) > max:
		return fmt.Errorf("is longer than %d characters", max)
	}
	return nil
}
