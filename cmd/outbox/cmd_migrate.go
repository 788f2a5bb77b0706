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
			"every deploy. With --wal, also creates WAL mode's publication and replication\n"+
			"slot (before any event is written in WAL mode); --drop-wal drops them.")
	idemTable := f.fs.String("idempotency-table", idempotency.DefaultTableName, "idempotency `table` name (empty: do not create it)")
	wal := f.fs.Bool("wal", false, "also set up WAL mode (PostgreSQL 14+, wal_level=logical): the publication and the logical replication slot")
	dropWAL := f.fs.Bool("drop-wal", false, "drop WAL mode's slot and publication instead (the last step back to table mode: the events the slot still holds are lost)")
	walSlot := f.fs.String("wal-slot", "", "WAL mode's replication `slot` (default: the table's name followed by _wal)")
	if err := f.parse(args); err != nil {
		return err
	}
	db, err := f.connect(ctx, true)
	if err != nil {
		return err
	}
	if *dropWAL {
		if err := outbox.DropWAL(ctx, db, outbox.WAL{Slot: *walSlot}); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "dropped WAL mode's slot and publication of %s\n", f.table)
		return nil
	}
	if err := outbox.Migrate(db.WithContext(ctx)); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "migrated %s, %s_relays and %s_attempts\n", f.table, f.table, f.table)
	if *wal {
		if err := outbox.MigrateWAL(db.WithContext(ctx), outbox.WAL{Slot: *walSlot}); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "set up WAL mode for %s (slot and publication %s)\n", f.table, walSlotName(f.table, *walSlot))
	}
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

// walSlotName is the slot of WAL mode for table: slot, or the default.
func walSlotName(table, slot string) string {
	if slot != "" {
		return slot
	}
	return table + "_wal"
}
