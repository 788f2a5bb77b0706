package main

import (
	"strings"
	"testing"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// outbox stats shows a relay's rescues of expired claims in a column of
// their own, not as failures (it showed "Failed 2000" for a relay that
// rescued 1,000 events and failed none), in text and JSON.
func TestStatsShowsRescuesApart(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			if err := db.Exec("INSERT INTO outbox_events_relays (id, host, pid, publisher, heartbeat_ms, started_at, last_beat, claimed, published, failed, dead, lost, rescued) " +
				"VALUES ('successor', 'h', 1, 'p', 1000, '2020-01-01 00:00:00', '2020-01-01 00:00:00', 1000, 1000, 0, 0, 0, 1000)").Error; err != nil {
				t.Fatal(err)
			}
			s := decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout)
			if len(s.Relays) != 1 || s.Relays[0].Failed != 0 || s.Relays[0].Rescued != 1000 {
				t.Errorf("stats --json: %+v, want failed 0, rescued 1000", s.Relays)
			}
			var head, row []string
			for _, l := range strings.Split(cmd(t, u, "stats").ok(t).stdout, "\n") {
				switch f := strings.Fields(l); {
				case len(f) > 0 && f[0] == "ID":
					head = f
				case len(f) > 0 && f[0] == "successor":
					row = f
				}
			}
			col := func(name string) string {
				for i, h := range head {
					if h == name && len(row) == len(head) { // LAST BEAT is two words, as is its value ("… ago")
						return row[i]
					}
				}
				return "?"
			}
			if col("FAILED") != "0" || col("RESCUED") != "1000" {
				t.Errorf("stats: FAILED %s, RESCUED %s; want 0, 1000:\n%q\n%q", col("FAILED"), col("RESCUED"), head, row)
			}
		})
	}
}
