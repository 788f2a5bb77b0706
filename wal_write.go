package outbox

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Limits of one statement of WAL messages.
const (
	maxMessagesPerStatement = 200
	maxBytesPerStatement    = 4 << 20
)

// writeWAL writes events as transactional logical decoding messages
// through db's transaction: one SELECT of pg_logical_emit_message per 200
// events, sent on the transaction's connection without GORM's statement
// machinery (the SQL holds no payload; errors wrap the driver's).
//
// No partition-key lock is taken: the relay reads the messages in commit
// order, which orders a key's events without one. Nothing checks event
// ids: a message has no unique index (see WAL).
func (w *writer) writeWAL(db *gorm.DB, events []encodedEvent) error {
	now := time.Now().UTC()
	ctx := db.Statement.Context
	for start := 0; start < len(events); {
		var sb strings.Builder
		args := make([]any, 0, min(len(events)-start, maxMessagesPerStatement))
		// One target list, evaluated in order (a FROM list of function
		// calls could be joined in any order). The prefix is inlined: the
		// table's name is a checked identifier.
		sb.WriteString("SELECT ")
		size := 0
		end := start
		for end < len(events) && end-start < maxMessagesPerStatement && (end == start || size <= maxBytesPerStatement) {
			content, err := walContent(&events[end], now)
			if err != nil {
				return err
			}
			if end > start {
				sb.WriteString(", ")
			}
			args = append(args, content)
			sb.WriteString("pg_logical_emit_message(true, '")
			sb.WriteString(w.walPrefix)
			sb.WriteString("', $")
			sb.WriteString(strconv.Itoa(len(args)))
			sb.WriteString("::text)")
			size += len(content)
			end++
		}
		if _, err := db.Statement.ConnPool.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("outbox: writing %d event(s) as WAL messages (%s): %w", end-start, w.walPrefix, err)
		}
		start = end
	}
	return nil
}
