package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// common are the flags every command takes.
type common struct {
	fs      *flag.FlagSet
	c       *cli
	db      string
	table   string
	json    bool
	timeout time.Duration
	shown   string // the database address, password hidden
}

// newFlags returns a flag set for the command with the common flags.
// usage is the line after "Usage: outbox "; help describes the command.
func newFlags(c *cli, name, usage, help string) *common {
	f := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError), c: c}
	f.fs.SetOutput(c.stderr)
	f.fs.StringVar(&f.db, "db", c.getenv("OUTBOX_DB"), "database `URL`: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:path/to/file.db (env OUTBOX_DB)")
	f.fs.StringVar(&f.table, "table", outbox.DefaultTableName, "outbox `table` name")
	f.fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up on the database after this long")
	f.fs.Usage = func() {
		w := f.fs.Output()
		fmt.Fprintf(w, "Usage: outbox %s\n\n%s\n\nFlags:\n", usage, help)
		f.fs.PrintDefaults()
	}
	return f
}

// withJSON adds --json, for read commands.
func (f *common) withJSON() *common {
	f.fs.BoolVar(&f.json, "json", false, "print JSON (a stable format for scripts) instead of text")
	return f
}

// parse parses args; a flag error is a usage error, --help is not an error.
func (f *common) parse(args []string) error {
	f.fs.SetOutput(f.c.stderr)
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			f.fs.SetOutput(f.c.stdout)
			f.fs.Usage()
			return flag.ErrHelp
		}
	}
	f.fs.SetOutput(io.Discard) // errors are reported once, by the caller
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usagef("unexpected argument %q", f.fs.Arg(0))
	}
	if f.db == "" {
		return usagef("no database: pass --db or set OUTBOX_DB")
	}
	if f.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	return nil
}

// open connects to the database with the outbox plugin installed, and
// checks that the outbox table exists.
func (f *common) open(ctx context.Context) (*gorm.DB, error) {
	db, err := f.connect(ctx)
	if err != nil {
		return nil, err
	}
	if !db.WithContext(ctx).Migrator().HasTable(f.table) {
		return nil, fmt.Errorf("table %s does not exist in %s: run 'outbox migrate' first (or pass the right --table)", f.table, f.shown)
	}
	return db, nil
}

// connect connects to the database with the outbox plugin installed.
func (f *common) connect(ctx context.Context) (*gorm.DB, error) {
	dsn, err := parseDB(f.db)
	if err != nil {
		return nil, err
	}
	f.shown = dsn.shown
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	db, err := dsn.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := db.Use(&outbox.Plugin{TableName: f.table}); err != nil {
		if errors.Is(err, outbox.ErrInvalidConfig) {
			return nil, usagef("--table: %v", err)
		}
		return nil, err
	}
	return db, nil
}
