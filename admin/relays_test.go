package admin_test

import (
	"regexp"
	"strings"
	"testing"

	"gorm.io/gorm"
)

var (
	relaysTableRE = regexp.MustCompile(`(?s)<section id="relays">.*?</section>`)
	thRE          = regexp.MustCompile(`<th[^>]*>([^<]*)</th>`)
	rowRE         = regexp.MustCompile(`(?s)<tr>(.*?)</tr>`)
	tdRE          = regexp.MustCompile(`(?s)<td>(.*?)</td>`)
)

// A relay that rescued the expired claims of a crashed one and failed
// nothing shows them as Rescued, not as Failed (the overview showed
// "Failed 2000" for 1,000 rescued events).
func TestRelaysShowRescuesApart(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Exec("INSERT INTO outbox_events_relays (id, host, pid, publisher, heartbeat_ms, started_at, last_beat, claimed, published, failed, dead, lost, rescued) "+
			"VALUES ('successor', 'h', 1, 'p', 1000, '2020-01-01 00:00:00', '2020-01-01 00:00:00', 1000, 1000, 0, 0, 0, 1000)").Error)
		_, body := newClient(t, newHandler(t, db)).get("/")
		section := relaysTableRE.FindString(body)
		var heads []string
		for _, m := range thRE.FindAllStringSubmatch(section, -1) {
			heads = append(heads, m[1])
		}
		var cells []string
		for _, row := range rowRE.FindAllStringSubmatch(section, -1) {
			if strings.Contains(row[1], "successor") {
				for _, m := range tdRE.FindAllStringSubmatch(row[1], -1) {
					cells = append(cells, m[1])
				}
			}
		}
		if len(cells) != len(heads) {
			t.Fatalf("the relays table: heads %q, the successor's row %q", heads, cells)
		}
		got := map[string]string{}
		for i, h := range heads {
			got[h] = cells[i]
		}
		if got["Failed"] != "0" || got["Rescued"] != "1000" || got["Published"] != "1000" {
			t.Errorf("the successor shows failed %q, rescued %q, published %q; want 0, 1000, 1000", got["Failed"], got["Rescued"], got["Published"])
		}
	})
}
