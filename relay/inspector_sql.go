package relay

// The SQL of the Inspector's reports that is more than GORM's query
// builder says. Everything dialect-specific is here; the clock
// expressions come from dialect.Kind.

// unfinishedIn is the status list of a key's unfinished events, the ones
// its head is the first of (and the key index holds).
const unfinishedIn = "('pending', 'publishing', 'failed')"

// blockedKeysSQL selects, for keys whose head is failed, the head's id
// and the number of unfinished events behind it, by head id after a
// cursor. Every probe is on the key index (partition_key, id) of
// unfinished keyed events. "h is its key's head" is a scalar subquery
// (the key's first unfinished id), not NOT EXISTS: a planner that
// underestimated the key index turned the anti-join into a nested loop
// over every pair of unfinished keyed events (1.7 s on 2,000 of them).
func blockedKeysSQL(table string) string {
	return "SELECT h.id AS id, (SELECT COUNT(*) FROM " + table + " w WHERE w.partition_key = h.partition_key" +
		" AND w.partition_key <> '' AND w.status IN " + unfinishedIn + " AND w.id > h.id) AS waiting" +
		" FROM " + table + " h WHERE h.status = 'failed' AND h.partition_key <> '' AND h.id > ?" +
		" AND h.id = (SELECT MIN(e.id) FROM " + table + " e WHERE e.partition_key = h.partition_key" +
		" AND e.partition_key <> '' AND e.status IN " + unfinishedIn + ")" +
		" ORDER BY h.id LIMIT ?"
}

// keyHeadSQL selects the head of a key: its first unfinished event.
func keyHeadSQL(table string) string {
	return "SELECT id, event_id, status, claim_version, last_error FROM " + table +
		" WHERE partition_key = ? AND partition_key <> '' AND status IN " + unfinishedIn + " ORDER BY id LIMIT 1"
}
