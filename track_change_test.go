package outbox_test

import (
	"encoding/json"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// LabelledNote has a field whose column is not its snake-case name.
type LabelledNote struct {
	ID    uint   `gorm:"primaryKey"`
	Title string `gorm:"column:headline;size:64"`
	Body  string `gorm:"size:64"`
}

// Issue 24, defect 8: Change.Changed accepts the field name as well as
// the column, in TrackFilter (which knows the model) and on a payload
// decoded with DecodeChange[T] or, for columns named by GORM's default
// naming, json.Unmarshal.
func TestTrackChangedByFieldName(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&LabelledNote{}, &Purchase{}))
		var inFilter []bool
		must(t, outbox.Track(db, &LabelledNote{}, outbox.TrackFilter(func(c *outbox.Change, _ *LabelledNote) bool {
			inFilter = append(inFilter, c.Changed("Title"), c.Changed("headline"), c.Changed("Body"), c.Changed("body"), c.Changed("title"))
			return true
		})))
		must(t, outbox.Track(db, &Purchase{}))
		n := LabelledNote{Title: "a", Body: "b"}
		must(t, db.Create(&n).Error)
		inFilter = nil
		must(t, db.Model(&n).Update("Title", "c").Error)
		if want := []bool{true, true, false, false, false}; !equalBools(inFilter, want) {
			t.Errorf("in TrackFilter: Changed(Title, headline, Body, body, title) = %v, want %v", inFilter, want)
		}
		p := Purchase{Customer: "c"}
		must(t, db.Create(&p).Error)
		must(t, db.Model(&p).Update("status", "paid").Error)

		evs := events(t, db)
		byType := map[string][]byte{}
		for _, e := range evs {
			byType[e.Type] = e.Payload
		}
		c, _, err := outbox.DecodeChange[LabelledNote](byType["labelled_note.updated"])
		must(t, err)
		if !c.Changed("Title") || !c.Changed("headline") || c.Changed("Body") {
			t.Errorf("DecodeChange[LabelledNote]: Changed(Title, headline, Body) = %v %v %v, want true true false", c.Changed("Title"), c.Changed("headline"), c.Changed("Body"))
		}
		var plain outbox.Change
		must(t, json.Unmarshal(byType["purchase.updated"], &plain))
		if !plain.Changed("Status") || !plain.Changed("status") || !plain.Changed("UpdatedAt") || plain.Changed("Customer") {
			t.Errorf("json.Unmarshal: Changed(Status, status, UpdatedAt, Customer) = %v %v %v %v, want true true true false",
				plain.Changed("Status"), plain.Changed("status"), plain.Changed("UpdatedAt"), plain.Changed("Customer"))
		}
	})
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
