// Package sqlitedsn rewrites a SQLite DSN written for mattn/go-sqlite3 (the
// cgo driver behind gorm.io/driver/sqlite) into the form that the pure-Go
// driver of a build without cgo (github.com/ncruces/go-sqlite3) reads, so
// that the tests and the CLI take the same DSNs in both builds. It imports
// no driver.
package sqlitedsn

import (
	"net/url"
	"sort"
	"strings"
)

// mattnPragmas maps mattn/go-sqlite3's connection parameters that set a
// PRAGMA, short forms included, to the PRAGMA's name.
var mattnPragmas = map[string]string{
	"_busy_timeout": "busy_timeout", "_timeout": "busy_timeout",
	"_journal_mode": "journal_mode", "_journal": "journal_mode",
	"_foreign_keys": "foreign_keys", "_fk": "foreign_keys",
	"_synchronous": "synchronous", "_sync": "synchronous",
	"_locking_mode": "locking_mode", "_locking": "locking_mode",
	"_auto_vacuum": "auto_vacuum", "_vacuum": "auto_vacuum",
	"_recursive_triggers": "recursive_triggers", "_rt": "recursive_triggers",
	"_case_sensitive_like": "case_sensitive_like", "_cslike": "case_sensitive_like",
	"_defer_foreign_keys": "defer_foreign_keys", "_defer_fk": "defer_foreign_keys",
	"_ignore_check_constraints": "ignore_check_constraints",
	"_query_only":               "query_only", "_secure_delete": "secure_delete",
	"_writable_schema": "writable_schema", "_cache_size": "cache_size",
}

// DefaultBusyTimeout is the busy timeout, in milliseconds, that PureGo sets
// when the DSN names none: mattn/go-sqlite3's default.
const DefaultBusyTimeout = "5000"

// PureGo returns dsn with mattn/go-sqlite3's PRAGMA parameters (such as
// _busy_timeout=5000 or _journal_mode=WAL) rewritten as _pragma=name(value)
// parameters, busy_timeout first (DefaultBusyTimeout when dsn sets none, as
// mattn does), and with the parameters of extra added where dsn lacks them.
// _txlock, _pragma and every other parameter are kept. The result is a
// file: URI (the pure-Go driver reads parameters only there): "file:" is
// put before a path that lacks it. A shared in-memory database
// (mode=memory&cache=shared, one database for every connection of the
// process that names it) becomes the pure-Go driver's memdb VFS
// (file:/name?vfs=memdb): that driver's SQLite has no shared cache, and
// each connection would open a private, empty database. The caller imports
// github.com/ncruces/go-sqlite3/vfs/memdb. It fails only on a query that
// does not parse.
func PureGo(dsn string, extra url.Values) (string, error) {
	path, query, _ := strings.Cut(dsn, "?")
	if !strings.HasPrefix(path, "file:") {
		path = "file:" + path
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", err
	}
	if strings.EqualFold(q.Get("mode"), "memory") && strings.EqualFold(q.Get("cache"), "shared") {
		path = "file:/" + strings.TrimLeft(strings.TrimPrefix(path, "file:"), "/")
		delete(q, "mode")
		delete(q, "cache")
		q.Set("vfs", "memdb")
	}
	busy := "busy_timeout(" + DefaultBusyTimeout + ")"
	var pragmas []string
	for k, vs := range q {
		name, ok := mattnPragmas[strings.ToLower(k)]
		if !ok {
			continue
		}
		delete(q, k)
		if name == "busy_timeout" {
			busy = name + "(" + vs[len(vs)-1] + ")"
		} else {
			pragmas = append(pragmas, name+"("+vs[len(vs)-1]+")")
		}
	}
	for _, p := range q["_pragma"] {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(p)), "busy_timeout") {
			busy = p
		} else {
			pragmas = append(pragmas, p)
		}
	}
	delete(q, "_pragma")
	sort.Strings(pragmas)
	for k, vs := range extra {
		if _, ok := q[k]; !ok {
			q[k] = vs
		}
	}
	var sb strings.Builder
	for _, p := range append([]string{busy}, pragmas...) {
		sb.WriteString("&_pragma=" + url.QueryEscape(p))
	}
	if rest := q.Encode(); rest != "" {
		sb.WriteString("&" + rest)
	}
	return path + "?" + sb.String()[1:], nil
}
