package main

import (
	"context"
	"fmt"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

func runMigrate(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "migrate", "migrate [flags]",
		"Creates the outbox table, its relays (heartbeats) table and the idempotency table,\n"+
			"with their indexes, if they do not exist. Safe to run on every deploy.")
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
	fmt.Fprintf(c.stdout, "migrated %s and %s_relays\n", f.table, f.table)
	if *idemTable == "" {
		return nil
	}
	store, err := idempotency.NewStore(db, idempotency.WithTable(*idemTable))
	if err != nil {
		return usagef("--idempotency-table: %v", err)
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "migrated %s\n", *idemTable)
	return nil
}
