package outbox

import (
	"context"
	"database/sql/driver"
	"fmt"
	"slices"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// payloadArg is a payload bound to the outbox INSERT: the bytes, stored as
// a BLOB/BYTEA.
type payloadArg []byte

// Value implements driver.Valuer.
func (p payloadArg) Value() (driver.Value, error) { return []byte(p), nil }

// headersArg is the JSON of an event's headers bound to the outbox INSERT,
// stored as text.
type headersArg string

// Value implements driver.Valuer.
func (h headersArg) Value() (driver.Value, error) { return string(h), nil }

// redactingLogger is the application's GORM logger for the outbox's own
// statements. GORM logs a statement with its bound values when it is slow
// or fails; this logger's ParamsFilter replaces payloads and headers with
// their sizes first, so that no payload byte reaches a log line. Everything
// else (the SQL, the event ids, the error) is logged as the application's
// logger would.
type redactingLogger struct{ logger.Interface }

var _ gorm.ParamsFilter = redactingLogger{}

// LogMode implements logger.Interface.
func (l redactingLogger) LogMode(level logger.LogLevel) logger.Interface {
	return redactingLogger{l.Interface.LogMode(level)}
}

// ParamsFilter implements gorm.ParamsFilter, then applies the application
// logger's own filter, if it has one.
func (l redactingLogger) ParamsFilter(ctx context.Context, sql string, params ...any) (string, []any) {
	out, copied := params, false
	for i, v := range params {
		var r string
		switch v := v.(type) {
		case payloadArg:
			r = fmt.Sprintf("<payload: %d bytes>", len(v))
		case headersArg:
			r = fmt.Sprintf("<headers: %d bytes>", len(v))
		default:
			continue
		}
		if !copied {
			out, copied = slices.Clone(params), true
		}
		out[i] = r
	}
	if f, ok := l.Interface.(gorm.ParamsFilter); ok {
		return f.ParamsFilter(ctx, sql, out...)
	}
	return sql, out
}
