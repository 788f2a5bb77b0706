// Command outbox operates a gorm-outbox table: it migrates the schema,
// runs a relay that forwards events to asynq, a Redis stream, RabbitMQ,
// NATS JetStream or Kafka (serving Prometheus metrics with --metrics-addr), shows
// one event, lists and replays dead events (and the messages consumers
// put in their brokers' dead letters), redelivers published ones,
// reports statistics and purges old events. It is a module of its own
// (it links every broker's client), so that library users do not download
// them.
//
//	go install github.com/gormoutbox/outbox/cmd/outbox@latest
//	export OUTBOX_DB=postgres://app@db:5432/app OUTBOX_REDIS=redis://cache:6379/0
//	outbox migrate
//	outbox relay --to asynq
//	outbox relay --to amqp --amqp-url amqp://user:password@rabbit:5672/ --exchange shop.events
//	outbox relay --to nats --nats-url nats://nats:4222 --subject-prefix shop. --metrics-addr :9090
//	outbox relay --to kafka --kafka-brokers kafka-1:9092,kafka-2:9092 --topic shop.events
//	outbox stats
//	outbox dead list --type order.created
//	outbox dead replay --all --type order.created --yes
//	outbox dead list --dead-letters redis://cache:6379/0?stream=orders.dead
//	outbox dead replay --dead-letters redis://cache:6379/0?stream=orders.dead --message 1714557600000-0 --yes
//	outbox show 0190a5b2-…
//	outbox redeliver --id 0190a5b2-… --yes
//	outbox admin --listen 127.0.0.1:8080 --prefix /outbox --dead-letters billing=amqp://user:password@rabbit:5672/?queue=billing.dead
//
// A consumer that gives up on a message puts it in its broker's dead
// letter and leaves the outbox's event published. --dead-letters
// (repeatable, or $OUTBOX_DEAD_LETTERS, whitespace-separated) names such a
// dead letter, [NAME=]URL: redis://host:6379/0?stream=S (outboxredis'
// dead-letter stream), asynq://host:6379/0?queue=Q (asynq's archive),
// amqp://user:password@host:5672/vhost?queue=Q (a dead-letter queue),
// nats://host:4222?stream=S[&subject=SUBJ], kafka://host:9092[,…]?topic=T.
// dead list lists a page of each after the outbox's dead events (the next
// with --dead-letters-after NAME=CURSOR), dead replay --message ID
// [--from NAME] --yes hands messages back to their consumers, and admin
// lists and replays them on its Consumers page.
//
// Run "outbox help" for the commands and "outbox <command> --help" for
// their flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"migrate":       {"create the outbox, relays and idempotency tables if missing", runMigrate},
		"relay":         {"run a relay that forwards events to asynq, a Redis stream, RabbitMQ, NATS or Kafka until SIGINT/SIGTERM", runRelay},
		"dispatch-once": {"claim and deliver one batch, then exit", runDispatchOnce},
		"dead":          {"list (dead list) or replay (dead replay) dead events, and consumers' dead letters", runDead},
		"show":          {"print one event: status, attempts, last error, lease, headers, payload", runShow},
		"redeliver":     {"deliver published (or dead) events again: back to pending (requires --yes)", runRedeliver},
		"stats":         {"count events per status, the oldest pending age and the live relays", runStats},
		"purge":         {"delete published events older than an age (dead ones only with --dead)", runPurge},
		"admin":         {"serve the admin page (overview, events, blocked keys, confirmed repairs) over HTTP", runAdmin},
	}
}

// cli carries the process's streams and environment into the commands.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// secrets holds the passwords of the addresses the command was given;
	// stderr is scrubbed of them.
	secrets *secrets
	// closers release what the command opened (its database pools), once
	// it returns.
	closers []func()
}

// close releases what the command opened.
func (c *cli) close() {
	for _, f := range c.closers {
		f()
	}
	c.closers = nil
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c := newCLI(os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	// The drivers' own loggers print to the process's stderr: through the scrubber.
	_ = mysql.SetLogger(log.New(c.stderr, "[mysql] ", log.LstdFlags))
	redis.SetLogger(redisLogger{log.New(c.stderr, "redis: ", log.LstdFlags)})
	code := run(ctx, os.Args[1:], c)
	stop()
	os.Exit(code)
}

// newCLI returns the cli of a command line, its stderr scrubbed of every
// password found in args and in the environment's addresses, and both
// streams escaped of terminal control characters (safeWriter).
func newCLI(args []string, stdout, stderr io.Writer, getenv func(string) string) *cli {
	s := &secrets{}
	s.addFrom(getenv("OUTBOX_DB"))
	s.addFrom(getenv("OUTBOX_REDIS"))
	s.addFrom(getenv("OUTBOX_AMQP"))
	s.addFrom(getenv("OUTBOX_NATS"))
	for _, v := range strings.Fields(getenv(deadLettersEnv)) {
		_, raw, _ := splitLabel(v)
		s.addFrom(raw)
	}
	for _, a := range args {
		s.addFrom(a)
		if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			s.addFrom(value) // --db=…
			a = value
		}
		if _, raw, ok := splitLabel(a); ok {
			s.addFrom(raw) // --dead-letters NAME=URL
		}
	}
	return &cli{stdout: safeWriter{stdout}, stderr: scrubWriter{w: safeWriter{stderr}, s: s}, getenv: getenv, secrets: s}
}

type redisLogger struct{ l *log.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) { r.l.Printf(format, v...) }

// run executes one command line and returns the exit status: 0 on
// success, 1 when the command failed, 2 for a usage error.
func run(ctx context.Context, args []string, c *cli) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if cmd, ok := cmds[args[1]]; ok {
				defer c.close()
				return exit(c, args[1], cmd.run(ctx, c, []string{"--help"}))
			}
		}
		printUsage(c.stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	defer c.close()
	if !ok {
		fmt.Fprintf(c.stderr, "outbox: unknown command %q\n\n", args[0])
		printUsage(c.stderr, cmds)
		return 2
	}
	return exit(c, args[0], cmd.run(ctx, c, args[1:]))
}

func exit(c *cli, name string, err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "outbox %s: %s\nRun 'outbox %s --help' for usage.\n", name, line(err.Error()), name)
		return 2
	default:
		fmt.Fprintf(c.stderr, "outbox %s: %s\n", name, line(err.Error()))
		return 1
	}
}

func printUsage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "Usage: outbox <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, dbFormsHelp)
	fmt.Fprintln(w)
	fmt.Fprintln(w, deadLettersHelp)
	fmt.Fprintln(w, "dead list, dead replay and admin take it.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Passwords are never printed.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'outbox <command> --help' for its flags.")
}
