package main

import (
	"context"
	"fmt"
	"time"
)

func runPurge(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "purge", "purge --older-than DURATION [--dead --yes]",
		"Deletes published events published more than --older-than ago, in batches.\n"+
			"With --dead it also deletes dead events created more than --older-than ago,\n"+
			"which cannot be replayed afterwards; that needs --yes.").withJSON()
	olderThan := f.fs.Duration("older-than", 0, "delete events older than this `duration` (e.g. 168h)")
	dead := f.fs.Bool("dead", false, "also delete dead events")
	yes := f.fs.Bool("yes", false, "confirm deleting dead events")
	if err := f.parse(args); err != nil {
		return err
	}
	if *olderThan <= 0 {
		return usagef("--older-than is required and must be positive, e.g. --older-than 168h")
	}
	if *dead && !*yes {
		return usagef("deleting dead events loses them for good: add --yes")
	}
	insp, err := f.inspect(ctx)
	if err != nil {
		return err
	}
	out := map[string]int64{}
	if out["published"], err = insp.PurgePublished(ctx, *olderThan); err != nil {
		return err
	}
	if *dead {
		if out["dead"], err = insp.PurgeDead(ctx, *olderThan); err != nil {
			return err
		}
	}
	if f.json {
		return writeJSON(c, out)
	}
	fmt.Fprintf(c.stdout, "deleted %d published event(s) older than %s\n", out["published"], olderThan.Round(time.Second))
	if *dead {
		fmt.Fprintf(c.stdout, "deleted %d dead event(s) older than %s\n", out["dead"], olderThan.Round(time.Second))
	}
	return nil
}
