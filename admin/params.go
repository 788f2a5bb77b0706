package admin

import (
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
)

// checkText checks a text parameter before any statement sees it: valid
// UTF-8, no NUL byte (PostgreSQL refuses both in text, which answered
// 500), and at most max characters (the column's size: a longer value
// matches nothing).
func checkText(name, v string, max int) error {
	switch {
	case !utf8.ValidString(v):
		return inputf("%s: not valid UTF-8", name)
	case strings.IndexByte(v, 0) >= 0:
		return inputf("%s: contains a NUL byte", name)
	case utf8.RuneCountInString(v) > max:
		return inputf("%s: longer than %d characters", name, max)
	}
	return nil
}

// textParam returns the trimmed parameter name of v, checked; required
// makes an empty one an error.
func textParam(v url.Values, name string, max int, required bool) (string, error) {
	s := strings.TrimSpace(v.Get(name))
	if err := checkText(name, s, max); err != nil {
		return "", err
	}
	if s == "" && required {
		return "", inputf("%s is required", name)
	}
	return s, nil
}

// eventIDParam returns the event id parameter, checked.
func eventIDParam(v url.Values) (string, error) {
	return textParam(v, "event_id", outbox.MaxIDLen, true)
}

// timeRange bounds the times a parameter may name: the range every
// database's time column holds (MySQL's DATETIME starts at year 1000).
var timeRange = [2]time.Time{time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}

// parseTime reads a time parameter in one of timeLayouts.
func parseTime(name, v string) (time.Time, error) {
	if err := checkText(name, v, 64); err != nil {
		return time.Time{}, err
	}
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			if t.Before(timeRange[0]) || !t.Before(timeRange[1]) {
				return time.Time{}, inputf("%s: %q is outside the years 1000 to 9999", name, v)
			}
			return t.UTC(), nil
		}
	}
	return time.Time{}, inputf("%s: %q is not a time (use 2006-01-02T15:04, UTC, or RFC 3339)", name, v)
}

// parseCursor reads a positive row id parameter (0 when absent).
func parseCursor(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, inputf("%s: %q is not a positive row id", name, v)
	}
	return n, nil
}

// maxAgeDays is the longest age in days that a time.Duration holds.
const maxAgeDays = int64(1<<63-1) / int64(24*time.Hour)

// parseAge reads a positive duration such as 168h, 90m or 7d: one that
// does not fit a time.Duration (about 292 years) is refused, not
// wrapped.
func parseAge(v string) (time.Duration, error) {
	bad := inputf("age: %q is not a positive duration of at most %dd (e.g. 168h, 90m or 7d)", v, maxAgeDays)
	if err := checkText("age", v, 64); err != nil {
		return 0, err
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n <= 0 || n > maxAgeDays || days[0] < '0' || days[0] > '9' {
			return 0, bad
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, bad
		}
	}
	if d <= 0 {
		return 0, bad
	}
	return d, nil
}
