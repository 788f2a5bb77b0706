// Command outbox operates a gorm-outbox table: it migrates the schema,
// runs a relay that forwards events to asynq or a Redis stream, lists and
// replays dead events, reports statistics and purges old events.
//
//	go install github.com/gormoutbox/outbox/cmd/outbox@latest
//	export OUTBOX_DB=postgres://app@db:5432/app OUTBOX_REDIS=redis://cache:6379/0
//	outbox migrate
//	outbox relay --to asynq
//	outbox stats
//	outbox dead list --type order.created
//	outbox dead replay --all --type order.created --yes
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
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"migrate":       {"create the outbox, relays and idempotency tables if missing", runMigrate},
		"relay":         {"run a relay that forwards events to asynq or a Redis stream until SIGINT/SIGTERM", runRelay},
		"dispatch-once": {"claim and deliver one batch, then exit", runDispatchOnce},
		"dead":          {"list (dead list) or replay (dead replay) dead events", runDead},
		"stats":         {"count events per status, the oldest pending age and the live relays", runStats},
		"purge":         {"delete published events older than an age (dead ones only with --dead)", runPurge},
	}
}

// cli carries the process's streams and environment into the commands.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &cli{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status: 0 on
// success, 1 when the command failed, 2 for a usage error.
func run(ctx context.Context, args []string, c *cli) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if cmd, ok := cmds[args[1]]; ok {
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
		fmt.Fprintf(c.stderr, "outbox %s: %v\nRun 'outbox %s --help' for usage.\n", name, err, name)
		return 2
	default:
		fmt.Fprintf(c.stderr, "outbox %s: %v\n", name, err)
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
	fmt.Fprintln(w, "Every command takes --db (or OUTBOX_DB): postgres://…, mysql://… or sqlite:path.")
	fmt.Fprintln(w, "Run 'outbox <command> --help' for its flags.")
}
