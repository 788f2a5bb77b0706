package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// common are the flags every command takes.
type common struct {
	fs      *flag.FlagSet
	c       *cli
	db      string
	driver  string
	table   string
	json    bool
	timeout time.Duration
	shown   string   // the database address, password hidden
	args    []string // the positional arguments
	nargs   [2]int   // how many positional arguments the command takes (min, max)
	argName string   // what they are, for messages
	// wal, when set, installs the plugin in WAL mode (outbox relay --wal).
	wal *outbox.WAL
	// dbOptional lets parse pass without a database: the command checks
	// (dead replay of a consumer's dead messages needs none).
	dbOptional bool
}

// newFlags returns a flag set for the command with the common flags.
// usage is the line after "Usage: outbox "; help describes the command.
func newFlags(c *cli, name, usage, help string) *common {
	f := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError), c: c}
	f.fs.SetOutput(c.stderr)
	// No environment value as the default: the usage would print it, password included.
	f.fs.StringVar(&f.db, "db", "", "database `address` (default $OUTBOX_DB): a URL, a driver's own DSN or a SQLite path; see 'outbox help'")
	f.fs.StringVar(&f.driver, "driver", "", "database `driver`: postgres, mysql or sqlite, when the form of --db does not say")
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

// withArgs lets the command take between min and max positional
// arguments, before, after or between the flags.
func (f *common) withArgs(min, max int, name string) *common {
	f.nargs, f.argName = [2]int{min, max}, name
	return f
}

// errNoDB is the usage error of a command without a database.
var errNoDB = usagef("no database: pass --db or set OUTBOX_DB")

// parse parses args; a flag error is a usage error, --help is not an error.
func (f *common) parse(args []string) error {
	f.fs.SetOutput(f.c.stderr)
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" || a == "-help" {
			f.fs.SetOutput(f.c.stdout)
			f.fs.Usage()
			return flag.ErrHelp
		}
	}
	f.fs.SetOutput(io.Discard) // errors are reported once, by the caller
	for {
		if err := f.fs.Parse(args); err != nil {
			return usagef("%v", err)
		}
		if f.fs.NArg() == 0 {
			break
		}
		if len(f.args) == f.nargs[1] {
			// Never echo it whole: an unquoted --db value split by the shell lands here.
			return usagef("unexpected argument %q (quote a --db value that holds spaces)", maskDSN(f.fs.Arg(0)))
		}
		f.args = append(f.args, f.fs.Arg(0))
		args = f.fs.Args()[1:]
	}
	if len(f.args) < f.nargs[0] {
		return usagef("missing %s", f.argName)
	}
	if f.db == "" {
		f.db = f.c.getenv("OUTBOX_DB")
	}
	if f.db == "" && !f.dbOptional {
		return errNoDB
	}
	if f.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	return nil
}

// open connects to the database with the outbox plugin installed, and
// checks that the outbox table exists.
func (f *common) open(ctx context.Context) (*gorm.DB, error) {
	db, err := f.connect(ctx, false)
	if err != nil {
		return nil, err
	}
	if err := probeTable(ctx, db, f.table); err != nil {
		return nil, fmt.Errorf("table %s does not exist in %s (%v): run 'outbox migrate' first (or pass the right --table)", f.table, f.shown, err)
	}
	return db, nil
}

// inspect opens the database and returns an Inspector of the table.
func (f *common) inspect(ctx context.Context) (*relay.Inspector, error) {
	db, err := f.open(ctx)
	if err != nil {
		return nil, err
	}
	return relay.NewInspector(db, relay.InspectTable(f.table))
}

// probeTable checks that table can be read. It queries the table rather
// than the catalog: the query folds an unquoted name the way every other
// statement of the outbox does (PostgreSQL folds OrderEvents to
// orderevents; its catalog holds the folded name).
func probeTable(ctx context.Context, db *gorm.DB, table string) error {
	var n []int
	return db.WithContext(ctx).Raw("SELECT 1 FROM " + table + " WHERE 1 = 0").Scan(&n).Error
}

// connect connects to the database with the outbox plugin installed. A
// SQLite file is created only if create is set.
func (f *common) connect(ctx context.Context, create bool) (*gorm.DB, error) {
	dsn, err := parseDB(f.db, f.driver)
	if err != nil {
		return nil, err
	}
	f.c.secrets.add(dsn.secrets...)
	f.shown = dsn.shown
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	db, err := dsn.open(ctx, create)
	if err != nil {
		return nil, err
	}
	if sqlDB, err := db.DB(); err == nil {
		f.c.closers = append(f.c.closers, func() { _ = sqlDB.Close() })
	}
	if err := db.Use(&outbox.Plugin{TableName: f.table, WAL: f.wal}); err != nil {
		if errors.Is(err, outbox.ErrWALNotReady) {
			return nil, err
		}
		if errors.Is(err, outbox.ErrInvalidConfig) {
			return nil, usagef("--table: %v", err)
		}
		return nil, err
	}
	return db, nil
}

// checkArgs checks values of a flag or argument before any statement sees
// them: UTF-8, no NUL byte, at most max characters (the column's size).
func checkArgs(name string, max int, values ...string) error {
	for _, v := range values {
		switch {
		case !utf8.ValidString(v):
			return usagef("%s %s: not valid UTF-8", name, cell(v))
		case strings.IndexByte(v, 0) >= 0:
			return usagef("%s %s: contains a NUL byte", name, cell(v))
		case utf8.RuneCountInString(v) > max:
			return usagef("%s: longer than %d characters", name, max)
		}
	}
	return nil
}
