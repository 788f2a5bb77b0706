package relay

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

// storedTimes is a driver whose claimed rows carry the instants stored in
// their time columns, whatever zone the database driver reads them in
// (MySQL with loc=Local: see dialect.Kind.StoredTime). The envelope's
// CreatedAt and the lag metric come from them.
type storedTimes struct {
	driver
	kind dialect.Kind
}

func withStoredTimes(kind dialect.Kind, d driver) driver { return storedTimes{driver: d, kind: kind} }

func (d storedTimes) claim(ctx context.Context, db *gorm.DB, worker string, limit, heads int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	rows, err := d.driver.claim(ctx, db, worker, limit, heads, lease)
	normaliseTimes(d.kind, rows)
	return rows, err
}

// normaliseTimes makes the times of rows read by the relay the instants
// the library stored (dialect.Kind.StoredTime).
func normaliseTimes(kind dialect.Kind, rows []outbox.OutboxEvent) {
	for i := range rows {
		e := &rows[i]
		e.AvailableAt, e.CreatedAt = kind.StoredTime(e.AvailableAt), kind.StoredTime(e.CreatedAt)
		e.LockedUntil, e.PublishedAt = kind.StoredTimePtr(e.LockedUntil), kind.StoredTimePtr(e.PublishedAt)
	}
}
