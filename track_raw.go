package outbox

import (
	"fmt"
	"regexp"
	"strings"

	"gorm.io/gorm"
)

// writeVerb matches the start of a statement that writes rows.
var writeVerb = regexp.MustCompile(`(?i)^\s*(WITH\b.*\b)?(INSERT|UPDATE|DELETE|REPLACE|MERGE)\b`)

// trackRaw runs before db.Exec and db.Raw(…).Scan/Row/Rows statements:
// one that writes the table of a tracked model cannot be captured. It is named in a
// debug message, or refused under TrackStrict. The statement's text is
// logged, never its bound values.
func (p *Plugin) trackRaw(db *gorm.DB) {
	if !p.trackedAny.Load() || db.Error != nil {
		return
	}
	sql := db.Statement.SQL.String()
	if !writeVerb.MatchString(sql) {
		return
	}
	p.tracked.Range(func(_, v any) bool {
		spec := v.(*trackSpec)
		if !mentionsTable(sql, spec.schema.Table) {
			return true
		}
		if spec.strict {
			_ = db.AddError(fmt.Errorf("%w: %s: raw SQL (db.Exec, db.Raw) writing table %s is not tracked (TrackStrict)", ErrUntrackable, spec.name, spec.schema.Table))
			return false
		}
		spec.logger.DebugContext(db.Statement.Context, "outbox: Track does not capture raw SQL (db.Exec, db.Raw); no event is written for this statement",
			"model", spec.name, "table", spec.schema.Table, "sql", sql)
		return true
	})
}

// mentionsTable reports whether sql names table as a whole identifier
// (bare or quoted).
func mentionsTable(sql, table string) bool {
	lower, name := strings.ToLower(sql), strings.ToLower(table)
	for i := 0; ; {
		j := strings.Index(lower[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		if (start == 0 || !identChar(lower[start-1])) && (end == len(lower) || !identChar(lower[end])) {
			return true
		}
		i = end
	}
}

func identChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
