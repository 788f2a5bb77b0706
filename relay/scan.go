package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

// claimColumns are the columns a claim returns: what an Envelope needs,
// and what completion (the fencing token, the attempts) and the lag
// metric need.
const claimColumns = "id, event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, attempts, max_attempts, claim_version, available_at, created_at"

// prefixed returns claimColumns qualified with the table alias a.
func prefixed(a string) string {
	return a + "." + strings.ReplaceAll(claimColumns, ", ", ", "+a+".")
}

// scanClaimed reads rows of claimColumns. It scans by hand rather than
// through GORM's reflection: the claim is on the relay's hot path.
func scanClaimed(rows *sql.Rows) ([]outbox.OutboxEvent, error) {
	defer rows.Close()
	var out []outbox.OutboxEvent
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// scanEvent scans the current row, of claimColumns and then the columns
// extra points to, as a claimed (publishing) event.
func scanEvent(rows *sql.Rows, extra ...any) (outbox.OutboxEvent, error) {
	var (
		e         outbox.OutboxEvent
		available anyTime
		created   anyTime
	)
	dest := []any{&e.ID, &e.EventID, &e.Type, &e.Version, &e.TenantID, &e.AggregateType, &e.AggregateID,
		&e.PartitionKey, &e.Topic, &e.Payload, &e.Headers, &e.Attempts, &e.MaxAttempts, &e.ClaimVersion,
		&available, &created}
	if err := rows.Scan(append(dest, extra...)...); err != nil {
		return e, err
	}
	e.AvailableAt, e.CreatedAt = available.t, created.t
	e.Status = outbox.StatusPublishing
	return e, nil
}

// anyTime scans a time whichever way the driver returns it: a time.Time,
// or text (MySQL without parseTime, SQLite without a declared type).
type anyTime struct{ t time.Time }

var textTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999",
	time.RFC3339Nano,
}

func (a *anyTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		a.t = time.Time{}
		return nil
	case time.Time:
		a.t = x
		return nil
	case []byte:
		return a.parse(string(x))
	case string:
		return a.parse(x)
	}
	return fmt.Errorf("relay: cannot scan %T as a time", v)
}

func (a *anyTime) parse(s string) error {
	for _, layout := range textTimeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			a.t = t
			return nil
		}
	}
	return fmt.Errorf("relay: cannot parse %q as a time", s)
}

// storedTimes is a driver whose claimed rows carry the instants stored in
// their time columns, whatever zone the database driver reads them in
// (MySQL with loc=Local: see dialect.Kind.StoredTime). The envelope's
// CreatedAt and the lag metric come from them.
type storedTimes struct {
	driver
	kind dialect.Kind
}

func withStoredTimes(kind dialect.Kind, d driver) driver { return storedTimes{driver: d, kind: kind} }

func (d storedTimes) claim(ctx context.Context, db *gorm.DB, worker string, limit int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	rows, err := d.driver.claim(ctx, db, worker, limit, lease)
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
