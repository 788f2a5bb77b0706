package sqlitedsn

import (
	"net/url"
	"testing"
)

func TestPureGo(t *testing.T) {
	cases := []struct {
		dsn   string
		extra url.Values
		want  string
	}{
		{"app.db", nil, "file:app.db?_pragma=busy_timeout%285000%29"},
		{"file:/tmp/a.db?_txlock=immediate&_busy_timeout=10000&_journal_mode=WAL&_foreign_keys=1", nil,
			"file:/tmp/a.db?_pragma=busy_timeout%2810000%29&_pragma=foreign_keys%281%29&_pragma=journal_mode%28WAL%29&_txlock=immediate"},
		{"file:x?mode=memory&cache=shared&_txlock=immediate&_fk=1", nil,
			"file:/x?_pragma=busy_timeout%285000%29&_pragma=foreign_keys%281%29&_txlock=immediate&vfs=memdb"},
		{"file:x?mode=memory", nil, "file:x?_pragma=busy_timeout%285000%29&mode=memory"},
		{"file:x?_pragma=busy_timeout(20)&_pragma=synchronous(NORMAL)&_timeout=99", nil,
			"file:x?_pragma=busy_timeout%2820%29&_pragma=synchronous%28NORMAL%29"},
		{"a.db?_timefmt=auto", url.Values{"_timefmt": {"sqlite"}, "_txlock": {"immediate"}},
			"file:a.db?_pragma=busy_timeout%285000%29&_timefmt=auto&_txlock=immediate"},
	}
	for _, c := range cases {
		got, err := PureGo(c.dsn, c.extra)
		if err != nil || got != c.want {
			t.Errorf("PureGo(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
		}
	}
	if _, err := PureGo("a.db?%zz", nil); err == nil {
		t.Error("PureGo of a query that does not parse: no error")
	}
}
