package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

func runMigrate(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "migrate", "migrate [flags]",
		"Creates the outbox table, its relays (heartbeats) table, its attempt log table and\n"+
			"the idempotency table, with their indexes, if they do not exist. Safe to run on\n"+
			"every deploy.")
	idemTable := f.fs.String("idempotency-table", idempotency.DefaultTableName, "idempotency `table` name (empty: do not create it)")
	if err := f.parse(args); err != nil {
		return err
	}
	db, err := f.connect(ctx, true)
	if err != nil {
		return err
	}
	if err := outbox.Migrate(db.WithContext(ctx)); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "migrated %s, %s_relays and %s_attempts\n", f.table, f.table, f.table)
	if *idemTable == "" {
		return nil
	}
	if err := idempotency.Migrate(ctx, db, idempotency.WithTable(*idemTable)); err != nil {
		if errors.Is(err, idempotency.ErrInvalidOption) {
			return usagef("--idempotency-table: %v", err)
		}
		return err
	}
	fmt.Fprintf(c.stdout, "migrated %s\n", *idemTable)
	return nil
}
