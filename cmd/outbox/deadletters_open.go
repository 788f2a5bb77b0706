package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
)

// deadLetters reads a consumer's dead letter through its adapter's reader
// (every adapter's reader replays too): it connects at its first use, and
// again once its connection closed, so that the admin page outlives a
// broker's restart. Its errors are scrubbed of the command's passwords:
// they reach stdout (--json) and the admin page.
type deadLetters struct {
	*deadLetterURL
	c *cli
	// timeout bounds connecting.
	timeout time.Duration

	mu     sync.Mutex
	reader consume.DeadLetterReader
	alive  func() bool // nil: the client reconnects by itself
	close  func()
}

var (
	_ consume.DeadLetterReader   = (*deadLetters)(nil)
	_ consume.DeadLetterReplayer = (*deadLetters)(nil)
)

// openDeadLetters returns the dead letters of the parsed URLs, closed when
// the command returns; nothing connects yet.
func openDeadLetters(c *cli, urls []*deadLetterURL, timeout time.Duration) []*deadLetters {
	out := make([]*deadLetters, len(urls))
	for i, u := range urls {
		d := &deadLetters{deadLetterURL: u, c: c, timeout: timeout}
		c.closers = append(c.closers, d.Close)
		out[i] = d
	}
	return out
}

// DeadLetters implements consume.DeadLetterReader.
func (d *deadLetters) DeadLetters(ctx context.Context, cursor string, limit int) ([]consume.DeadMessage, string, error) {
	r, err := d.get(ctx)
	if err != nil {
		return nil, "", err
	}
	page, next, err := r.DeadLetters(ctx, cursor, limit)
	return page, next, d.scrub(err)
}

// ReplayDead implements consume.DeadLetterReplayer.
func (d *deadLetters) ReplayDead(ctx context.Context, ids ...string) (int, error) {
	r, err := d.get(ctx)
	if err != nil {
		return 0, err
	}
	rp, ok := r.(consume.DeadLetterReplayer)
	if !ok {
		return 0, fmt.Errorf("the %s dead letter cannot replay", d.kind)
	}
	n, err := rp.ReplayDead(ctx, ids...)
	return n, d.scrub(err)
}

// Close closes the connection, if any.
func (d *deadLetters) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.close != nil {
		d.close()
	}
	d.reader, d.alive, d.close = nil, nil, nil
}

// get returns the reader, connecting first when it has no live one.
func (d *deadLetters) get(ctx context.Context) (consume.DeadLetterReader, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reader != nil && (d.alive == nil || d.alive()) {
		return d.reader, nil
	}
	if d.close != nil {
		d.close()
		d.reader, d.alive, d.close = nil, nil, nil
	}
	timeout := d.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	var err error
	switch d.kind {
	case "redis", "asynq":
		err = d.openRedis()
	case "amqp":
		err = d.openAMQP(timeout)
	case "nats":
		err = d.openNATS(timeout)
	case "kafka":
		err = d.openKafka(timeout)
	}
	if err != nil {
		return nil, d.scrub(fmt.Errorf("connecting to %s: %w", d.where(), err))
	}
	return d.reader, nil
}

// where is the dead letter's address, without a password.
func (d *deadLetters) where() string { return d.u.Scheme + "://" + d.u.Host }

func (d *deadLetters) openRedis() error {
	opt, err := redis.ParseURL(d.lib)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	if d.kind == "asynq" {
		d.reader = outboxasynq.NewDeadLetters(rdb, d.target)
	} else {
		d.reader = outboxredis.NewDeadLetters(rdb, d.target)
	}
	d.close = func() { _ = rdb.Close() }
	return nil
}

func (d *deadLetters) openAMQP(timeout time.Duration) error {
	cfg := amqp.Config{Properties: amqp.NewConnectionProperties(), Dial: amqp.DefaultDial(timeout)}
	cfg.Properties.SetClientConnectionName("outbox dead letters")
	conn, err := amqp.DialConfig(d.lib, cfg)
	if err != nil {
		return err
	}
	d.reader, d.alive = outboxamqp.NewDeadLetters(conn, d.target), func() bool { return !conn.IsClosed() }
	d.close = func() { _ = conn.Close() }
	return nil
}

func (d *deadLetters) openNATS(timeout time.Duration) error {
	nc, err := nats.Connect(natsServers(d.u), nats.Name("outbox dead letters"), nats.Timeout(timeout))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	d.reader, d.alive, d.close = outboxnats.NewDeadLetters(js, d.target, d.subject), func() bool { return !nc.IsClosed() }, nc.Close
	return nil
}

// natsServers is the URL's comma-separated hosts as nats.Connect's list
// of URLs, each with the user information.
func natsServers(u *url.URL) string {
	hosts := strings.Split(u.Host, ",")
	for i, h := range hosts {
		s := url.URL{Scheme: u.Scheme, User: u.User, Host: strings.TrimSpace(h)}
		hosts[i] = s.String()
	}
	return strings.Join(hosts, ",")
}

func (d *deadLetters) openKafka(timeout time.Duration) error {
	opts := []kgo.Opt{kgo.SeedBrokers(kafkaSeeds(d.u)...), kgo.DialTimeout(timeout), kgo.ClientID("outbox-dead-letters")}
	d.reader = outboxkafka.NewDeadLetters(opts, d.target)
	return nil
}

// kafkaSeeds is the URL's comma-separated hosts.
func kafkaSeeds(u *url.URL) []string {
	seeds := strings.Split(u.Host, ",")
	for i, s := range seeds {
		seeds[i] = strings.TrimSpace(s)
	}
	return seeds
}

// checkHosts checks the comma-separated host:port list of a NATS or Kafka
// URL.
func (d *deadLetterURL) checkHosts() error {
	if d.kind != "nats" && d.kind != "kafka" {
		return nil
	}
	for _, h := range kafkaSeeds(d.u) {
		if host, port, err := net.SplitHostPort(h); err != nil || host == "" || port == "" {
			return usagef("--dead-letters %s: want host:port[,host:port…] after %s://", d.shown, d.u.Scheme)
		}
	}
	return nil
}

// checkLib checks what the client library will parse, and the hosts.
func (d *deadLetterURL) checkLib(c *cli) error {
	var err error
	switch d.kind {
	case "redis", "asynq":
		_, err = redis.ParseURL(d.lib)
	case "amqp":
		_, err = amqp.ParseURI(d.lib)
	case "nats", "kafka":
		return d.checkHosts()
	}
	if err != nil {
		return usagef("--dead-letters %s: %s", d.shown, c.secrets.scrub(err.Error()))
	}
	return nil
}

// scrubbedError is an error whose text is scrubbed of passwords.
type scrubbedError struct {
	text string
	err  error
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrub returns err with its text scrubbed of the command's passwords.
func (d *deadLetters) scrub(err error) error {
	if err == nil {
		return nil
	}
	return &scrubbedError{text: d.c.secrets.scrub(err.Error()), err: err}
}
