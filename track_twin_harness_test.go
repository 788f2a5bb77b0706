package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// The twin harness runs one statement on two databases of the same
// dialect holding the same rows: in one the models are tracked, in the
// other they are not (its plugin is installed, nothing is tracked). The
// rows, RowsAffected, the error and the value the statement wrote into
// must match; on the tracked side there must be exactly one correct
// event per row the statement changed, and none for a row it left alone.

// twinNow is both twins' clock (gorm.Config.NowFunc), so that the times
// GORM writes compare equal; twinSeeded is the time of the seeded rows.
var (
	twinNow    = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	twinSeeded = time.Date(2020, 6, 7, 8, 9, 10, 0, time.UTC)
)

// TwinDoc has soft delete and an updated_at.
type TwinDoc struct {
	ID        uint   `gorm:"primaryKey"`
	State     string `gorm:"size:32"`
	Amount    int
	Owner     string `gorm:"size:32"`
	UpdatedAt time.Time
	DeletedAt gorm.DeletedAt `gorm:"index"`
}

// TwinNote has neither, and is tracked with TrackOldValues.
type TwinNote struct {
	ID     uint   `gorm:"primaryKey"`
	State  string `gorm:"size:32"`
	Amount int
}

// TwinTag has a string key: upserts of keys the application chooses.
type TwinTag struct {
	Code   string `gorm:"primaryKey;size:32"`
	State  string `gorm:"size:32"`
	Amount int
}

// TwinBox has items saved with it, and a hook that writes a TwinNote
// (another tracked model) when its label starts with "hook".
type TwinBox struct {
	ID    uint   `gorm:"primaryKey"`
	Label string `gorm:"size:32"`
	Items []TwinItem
}

func (b *TwinBox) AfterCreate(tx *gorm.DB) error { return b.hook(tx, "created") }

// AfterUpdate writes a TwinNote when the label starts with "hook".
func (b *TwinBox) AfterUpdate(tx *gorm.DB) error { return b.hook(tx, "updated") }

// AfterDelete writes a TwinNote when the label starts with "hook".
func (b *TwinBox) AfterDelete(tx *gorm.DB) error { return b.hook(tx, "deleted") }

func (b *TwinBox) hook(tx *gorm.DB, op string) error {
	if !strings.HasPrefix(b.Label, "hook") {
		return nil
	}
	return tx.Create(&TwinNote{State: op + " " + b.Label}).Error
}

// TwinItem belongs to a TwinBox.
type TwinItem struct {
	ID        uint `gorm:"primaryKey"`
	TwinBoxID uint
	SKU       string `gorm:"size:32"`
	Qty       int
}

// TwinProfile has a field per serializer GORM ships, and a custom one.
type TwinProfile struct {
	ID     uint              `gorm:"primaryKey"`
	Name   string            `gorm:"size:32"`
	Prefs  map[string]string `gorm:"serializer:json;type:text"`
	Tags   []string          `gorm:"serializer:gob;type:bytes"`
	Seen   int64             `gorm:"serializer:unixtime;type:timestamp"`
	Secret twinSecret        `gorm:"serializer:twin_rot13;type:text"`
}

// twinSecret is stored rot13-encoded by the custom serializer.
type twinSecret struct{ Word string }

// twinRot13 is a custom serializer: a twinSecret stored as its word, rot13.
type twinRot13 struct{}

func (twinRot13) Scan(ctx context.Context, f *schema.Field, dst reflect.Value, dbValue any) error {
	var s string
	switch v := dbValue.(type) {
	case []byte:
		s = string(v)
	case string:
		s = v
	}
	return f.Set(ctx, dst, twinSecret{Word: rot13(s)})
}

func (twinRot13) Value(_ context.Context, _ *schema.Field, _ reflect.Value, v any) (any, error) {
	return rot13(v.(twinSecret).Word), nil
}

func rot13(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return 'a' + (r-'a'+13)%26
		case r >= 'A' && r <= 'Z':
			return 'A' + (r-'A'+13)%26
		}
		return r
	}, s)
}

func init() { schema.RegisterSerializer("twin_rot13", twinRot13{}) }

// TwinSlug has a key the database assigns and another unique column: an
// upsert that conflicts on the slug (Track's doc: reported as created).
type TwinSlug struct {
	ID    uint   `gorm:"primaryKey"`
	Slug  string `gorm:"size:32;uniqueIndex"`
	State string `gorm:"size:32"`
}

// TwinOwner is never tracked: a table for subqueries and joins.
type TwinOwner struct {
	Name   string `gorm:"primaryKey;size:32"`
	Active bool
}

// twinTracked are the tracked models, with the options they are tracked with.
var twinTracked = []struct {
	model any
	opts  []outbox.TrackOption
}{
	{&TwinDoc{}, nil},
	{&TwinNote{}, []outbox.TrackOption{outbox.TrackOldValues()}},
	{&TwinTag{}, nil},
	{&TwinBox{}, nil},
	{&TwinItem{}, nil},
	{&TwinProfile{}, nil},
	{&TwinSlug{}, nil},
}

// twinLog discards Track's warnings about the writes it cannot capture
// (a Create of a map, on purpose).
var twinLog = slog.New(slog.DiscardHandler)

// twin is one dialect's pair of databases.
type twin struct {
	dialect        string
	tracked, plain *gorm.DB
}

// eachTwin runs fn per dialect, the dialects in parallel (each on a pair
// of fresh databases of its own, migrated; runCase seeds them).
func eachTwin(t *testing.T, fn func(t *testing.T, tw *twin)) {
	t.Helper()
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			fn(t, openTwin(t, d))
		})
	}
}

func openTwin(t *testing.T, dialect string) *twin {
	t.Helper()
	return newTwin(t, dialect, func(cfg *gorm.Config) *gorm.DB { return testenv.OpenConfig(t, dialect, cfg) })
}

// newTwin makes a twin of the databases open returns, given the twins'
// configuration.
func newTwin(t *testing.T, dialect string, open func(cfg *gorm.Config) *gorm.DB) *twin {
	t.Helper()
	tw := &twin{dialect: dialect}
	for i, db := range []**gorm.DB{&tw.tracked, &tw.plain} {
		cfg := testenv.Config()
		cfg.NowFunc = func() time.Time { return twinNow }
		*db = open(cfg)
		must(t, (*db).Use(&outbox.Plugin{AutoMigrate: true}))
		must(t, (*db).AutoMigrate(&TwinDoc{}, &TwinNote{}, &TwinTag{}, &TwinBox{}, &TwinItem{}, &TwinProfile{}, &TwinSlug{}, &TwinOwner{}))
		if i == 0 {
			for _, m := range twinTracked {
				must(t, outbox.Track(*db, m.model, append(m.opts, outbox.TrackLogger(twinLog))...))
			}
		}
	}
	return tw
}

// twinTables are the seeded tables, children first.
var twinTables = []string{"twin_slugs", "twin_profiles", "twin_items", "twin_boxes", "twin_docs", "twin_notes", "twin_tags", "twin_owners"}

// seed empties both databases' tables and writes the same rows to each,
// leaving no event.
func (tw *twin) seed(t *testing.T) {
	t.Helper()
	for _, db := range []*gorm.DB{tw.tracked, tw.plain} {
		for _, table := range twinTables {
			must(t, db.Exec("DELETE FROM "+table).Error)
		}
		at := func(id uint, state string, amount int, owner string) TwinDoc {
			return TwinDoc{ID: id, State: state, Amount: amount, Owner: owner, UpdatedAt: twinSeeded}
		}
		docs := []TwinDoc{at(1, "new", 5, "ann"), at(2, "pending", 7, "bob"), at(3, "new", 1, "ann"),
			at(4, "paid", 3, "cid"), at(5, "pending", 9, "bob"), at(6, "new", 2, "ann")}
		docs[5].DeletedAt = gorm.DeletedAt{Time: twinSeeded, Valid: true}
		must(t, db.Create(&docs).Error)
		must(t, db.Create(&[]TwinNote{{1, "new", 1}, {2, "pending", 2}, {3, "paid", 3}, {4, "new", 4}}).Error)
		must(t, db.Create(&[]TwinTag{{"a", "new", 1}, {"b", "new", 2}, {"c", "paid", 3}}).Error)
		must(t, db.Create(&[]TwinOwner{{"ann", true}, {"bob", false}, {"cid", true}}).Error)
		must(t, db.Create(&[]TwinProfile{
			{ID: 1, Name: "ann", Prefs: map[string]string{"lang": "en"}, Tags: []string{"x"}, Seen: 1600000000, Secret: twinSecret{"open"}},
			{ID: 2, Name: "bob", Prefs: map[string]string{"lang": "fr"}, Tags: []string{"y", "z"}, Seen: 1600000001, Secret: twinSecret{"shut"}},
		}).Error)
		must(t, db.Create(&[]TwinSlug{{ID: 1, Slug: "s1", State: "new"}, {ID: 2, Slug: "s2", State: "new"}}).Error)
		must(t, db.Create(&TwinBox{ID: 1, Label: "one", Items: []TwinItem{{ID: 1, SKU: "x", Qty: 1}, {ID: 2, SKU: "y", Qty: 2}}}).Error)
		if tw.dialect == testenv.Postgres {
			for _, table := range []string{"twin_docs", "twin_notes", "twin_boxes", "twin_items", "twin_profiles", "twin_slugs"} {
				must(t, db.Exec("SELECT setval(pg_get_serial_sequence('"+table+"', 'id'), 100)").Error)
			}
		}
		clearOutbox(t, db)
	}
}

// twinRows is a table's rows by primary key, each as its JSON object
// (times in UTC).
type twinRows map[string]map[string]any

// twinModels are the tracked models whose rows are compared, by their
// aggregate type.
var twinModels = map[string]any{
	"twin_doc": TwinDoc{}, "twin_note": TwinNote{}, "twin_tag": TwinTag{}, "twin_box": TwinBox{}, "twin_item": TwinItem{},
	"twin_profile": TwinProfile{}, "twin_slug": TwinSlug{},
}

// dump reads every row of the tracked models (soft-deleted ones included).
func dump(t *testing.T, db *gorm.DB) map[string]twinRows {
	t.Helper()
	out := map[string]twinRows{}
	for name, m := range twinModels {
		rows := reflect.New(reflect.SliceOf(reflect.TypeOf(m)))
		must(t, db.Unscoped().Omit("Items").Find(rows.Interface()).Error)
		out[name] = twinRows{}
		for i := range rows.Elem().Len() {
			r := rows.Elem().Index(i)
			out[name][twinKey(r)] = normalized(t, r.Interface())
		}
	}
	owners := twinRows{}
	var os []TwinOwner
	must(t, db.Find(&os).Error)
	for _, o := range os {
		owners[o.Name] = normalized(t, o)
	}
	out["twin_owner"] = owners
	return out
}

// twinKey is a harness row's primary key as Track's AggregateID.
func twinKey(r reflect.Value) string {
	if f := r.FieldByName("Code"); f.IsValid() {
		return f.String()
	}
	return fmt.Sprint(r.FieldByName("ID").Interface())
}

// normalized is v's JSON object, its times in UTC and without the
// associations (compared as their own rows).
func normalized(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return normalizedJSON(t, b)
}

func normalizedJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	must(t, json.Unmarshal(b, &m))
	delete(m, "Items")
	for k, v := range m {
		m[k] = normalValue(v)
	}
	return m
}

// normalValue puts a time in UTC; other values stay as decoded.
func normalValue(v any) any {
	if s, ok := v.(string); ok {
		if tm, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return tm.UTC().Format(time.RFC3339Nano)
		}
	}
	return v
}

// twinCase is one statement run on both twins.
type twinCase struct {
	name string
	// run runs the statement on db and returns its result and the value
	// it wrote into (compared between the twins; nil: none).
	run func(db *gorm.DB) (*gorm.DB, any)
	// first, when set, runs on each twin before the statement, and its
	// result is the db run is given (a statement value used again).
	first func(db *gorm.DB) *gorm.DB
	// only names the dialects the case runs on (nil: all).
	only []string
	// unchanged are rows ("twin_doc:3") that may have an updated event
	// though the statement left their values as they were: a row an
	// UPDATE matched counts as affected (Track's doc).
	unchanged []string
	// uncaptured: a write Track documents it cannot capture (no events
	// are checked; rows, counts and errors are).
	uncaptured bool
}

// outcome is what one twin's run left.
type outcome struct {
	rows     map[string]twinRows
	affected int64
	err      error
	value    string
}

// runCase runs c on both twins and checks them against each other, and
// the tracked twin's events against the rows.
func (tw *twin) runCase(t *testing.T, c twinCase) {
	t.Helper()
	if c.only != nil && !slices.Contains(c.only, tw.dialect) {
		t.Skipf("%s only", strings.Join(c.only, ", "))
	}
	tw.seed(t)
	dbs := []*gorm.DB{tw.tracked, tw.plain}
	if c.first != nil {
		for i, db := range dbs {
			dbs[i] = c.first(db)
			must(t, dbs[i].Error)
			clearOutbox(t, db)
		}
	}
	before := dump(t, tw.tracked)
	plain := tw.runOn(t, dbs[1], c)
	tracked := tw.runOn(t, dbs[0], c)
	tw.compare(t, tracked, plain)
	if c.uncaptured {
		return
	}
	checkEvents(t, before, tracked.rows, trackedOf(t, tw.tracked), c.unchanged)
}

func (tw *twin) runOn(t *testing.T, db *gorm.DB, c twinCase) outcome {
	t.Helper()
	res, v := c.run(db)
	o := outcome{affected: res.RowsAffected, err: res.Error}
	if v != nil {
		b, err := json.Marshal(v)
		must(t, err)
		o.value = string(b)
	}
	o.rows = dump(t, db.Session(&gorm.Session{NewDB: true}))
	return o
}

// compare fails t where the tracked twin's run differs from the plain
// one's: rows, RowsAffected, error (the tracked error may add context
// around the plain one's message), and the value written into.
func (tw *twin) compare(t *testing.T, tracked, plain outcome) {
	t.Helper()
	switch {
	case (tracked.err == nil) != (plain.err == nil):
		t.Errorf("error: tracked %v, untracked %v", tracked.err, plain.err)
	case tracked.err != nil && !strings.Contains(tracked.err.Error(), plain.err.Error()):
		t.Errorf("error: tracked %q, untracked %q", tracked.err, plain.err)
	}
	if tracked.affected != plain.affected {
		t.Errorf("RowsAffected: tracked %d, untracked %d", tracked.affected, plain.affected)
	}
	if tracked.value != plain.value {
		t.Errorf("value written into:\ntracked   %s\nuntracked %s", tracked.value, plain.value)
	}
	for name, rows := range plain.rows {
		for _, k := range unionKeys(rows, tracked.rows[name]) {
			if !reflect.DeepEqual(rows[k], tracked.rows[name][k]) {
				t.Errorf("%s %s:\ntracked   %v\nuntracked %v", name, k, tracked.rows[name][k], rows[k])
			}
		}
	}
}

func unionKeys(a, b twinRows) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// trackedOf reads the tracked twin's events.
func trackedOf(t *testing.T, db *gorm.DB) []trackedEvent { t.Helper(); return tracked(t, db) }

// checkEvents checks the events against the rows before and after: one
// event per changed row, of the right operation, naming its row, with
// old and new values that are the row's before and after; none for a row
// left as it was (unless listed in unchanged).
func checkEvents(t *testing.T, before, after map[string]twinRows, evs []trackedEvent, unchanged []string) {
	t.Helper()
	seen := map[string]int{}
	for _, e := range evs {
		name, op, _ := strings.Cut(e.Type, ".")
		key := name + ":" + e.AggregateID
		seen[key]++
		if _, ok := twinModels[name]; !ok {
			t.Errorf("event %s %s of no harness model", e.Type, e.AggregateID)
			continue
		}
		if e.PartitionKey != key || e.AggregateType != name || string(e.Change.Op) != op {
			t.Errorf("event %s %s: partition key %q, aggregate %q, op %q", e.Type, e.AggregateID, e.PartitionKey, e.AggregateType, e.Change.Op)
		}
		checkEvent(t, e, key, before[name][e.AggregateID], after[name][e.AggregateID], slices.Contains(unchanged, key))
	}
	for name, rows := range after {
		if _, ok := twinModels[name]; !ok {
			continue
		}
		for _, k := range unionKeys(before[name], rows) {
			key := name + ":" + k
			if !reflect.DeepEqual(before[name][k], rows[k]) && seen[key] != 1 {
				t.Errorf("%s changed (%v -> %v): %d events, want 1", key, before[name][k], rows[k], seen[key])
			}
			if seen[key] > 1 {
				t.Errorf("%s: %d events, want at most 1", key, seen[key])
			}
		}
	}
}

// checkEvent checks one event against its row before (nil: it did not
// exist) and after (nil: it was deleted).
func checkEvent(t *testing.T, e trackedEvent, key string, before, after map[string]any, mayBeUnchanged bool) {
	t.Helper()
	deleted := func(r map[string]any) bool { return r == nil || (r["DeletedAt"] != nil) }
	c := e.Change
	switch c.Op {
	case outbox.ChangeCreated:
		if before != nil || after == nil {
			t.Errorf("%s created: before %v, after %v", key, before, after)
		} else if !reflect.DeepEqual(normalizedJSON(t, c.Row), after) {
			t.Errorf("%s created: row %s, stored %v", key, c.Row, after)
		}
	case outbox.ChangeDeleted:
		// A hard delete removes a row, soft-deleted or not; a soft one
		// marks a row that was not.
		gone := before == nil || (c.Soft && deleted(before))
		if gone || !deleted(after) || (after == nil) == c.Soft {
			t.Errorf("%s deleted (soft %v): before %v, after %v", key, c.Soft, before, after)
		}
		if len(c.Row) > 0 && !reflect.DeepEqual(normalizedJSON(t, c.Row), before) {
			t.Errorf("%s deleted: row %s, was %v", key, c.Row, before)
		}
		return
	case outbox.ChangeUpdated:
		if before == nil || after == nil || (reflect.DeepEqual(before, after) && !mayBeUnchanged) {
			t.Errorf("%s updated: before %v, after %v", key, before, after)
			return
		}
	}
	if after == nil {
		return
	}
	// A row read after the write (an update whose rows were read first)
	// is the row as stored.
	if c.Old != nil && !reflect.DeepEqual(normalizedJSON(t, c.Row), after) {
		t.Errorf("%s %s: row %s, stored %v", key, c.Op, c.Row, after)
	}
	for col, v := range c.New {
		if got, want := normalValue(v), valueOf(after, col); !sameJSON(got, want) {
			t.Errorf("%s %s: new %s = %v, stored %v", key, c.Op, col, got, want)
		}
	}
	for col, v := range c.Old {
		if got, want := normalValue(v), valueOf(before, col); !sameJSON(got, want) {
			t.Errorf("%s %s: old %s = %v, was %v", key, c.Op, col, got, want)
		}
	}
}

// valueOf is a row's value of a column (the harness's field names are
// their columns in CamelCase).
func valueOf(row map[string]any, column string) any {
	for k, v := range row {
		if strings.EqualFold(strings.ReplaceAll(column, "_", ""), k) {
			return v
		}
	}
	return fmt.Sprintf("<no column %s>", column)
}

func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
