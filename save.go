package outbox

import (
	"reflect"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// db.Save(&m) of a struct whose primary key is set runs GORM's update
// chain, with its hooks, in a transaction of its own; when the UPDATE
// matched no row (a new row with an application-chosen key, or on MySQL
// an unchanged one), GORM then runs an upsert Create of the same value,
// hooks skipped, in a second transaction. Events written by the update
// chain would commit even when that insert fails. So an update statement
// of Save's shape that matched no row writes nothing: it hands the events
// its hooks emitted to the Create of the same value that follows, which
// writes them, and the value's recorded events, in its own transaction.
//
// The hand-off is keyed by the value's pointer. An update of Save's shape
// that no Create follows (db.Select("*").Save(&m) matching no row) changed
// nothing: its hand-off is replaced by the next one for the same value, and
// forgotten after handoffTTL in any case, so nothing is kept for long and
// no unrelated statement writes it.
type saveHandoffs struct {
	mu sync.Mutex
	m  map[any]saveHandoff
}

type saveHandoff struct {
	events []encodedEvent
	at     time.Time
}

// handoffTTL bounds how long an unclaimed hand-off is kept; the Create
// that claims one runs right after the update chain returns.
const handoffTTL = time.Minute

// handOff reports whether the update statement of db is a Save that matched
// no row; if so it keeps events for the insert that follows.
func (h *saveHandoffs) handOff(db *gorm.DB, events []encodedEvent) bool {
	if db.RowsAffected != 0 || !saveShaped(db.Statement) {
		return false
	}
	key := db.Statement.Dest
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, v := range h.m {
		if now.Sub(v.at) > handoffTTL {
			delete(h.m, k)
		}
	}
	if len(events) == 0 {
		delete(h.m, key)
		return true
	}
	if h.m == nil {
		h.m = make(map[any]saveHandoff)
	}
	h.m[key] = saveHandoff{events: events, at: now}
	return true
}

// take returns, and forgets, the events handed to the create statement
// stmt if it is the insert of a Save.
func (h *saveHandoffs) take(stmt *gorm.Statement) []encodedEvent {
	if !stmt.SkipHooks || !saveShaped(stmt) {
		return nil
	}
	c, ok := stmt.Clauses["ON CONFLICT"]
	if oc, isOC := c.Expression.(clause.OnConflict); !ok || !isOC || !oc.UpdateAll {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[stmt.Dest]
	if !ok {
		return nil
	}
	delete(h.m, stmt.Dest)
	return v.events
}

// saveShaped reports whether stmt has the shape of db.Save(&m) of a struct:
// every column selected, and the value itself as model and destination.
func saveShaped(stmt *gorm.Statement) bool {
	if len(stmt.Selects) != 1 || stmt.Selects[0] != "*" || stmt.ReflectValue.Kind() != reflect.Struct {
		return false
	}
	dest := reflect.ValueOf(stmt.Dest)
	// Model is compared only once Dest is known to be a pointer: == on two
	// interfaces holding the same non-comparable type would panic.
	return dest.Kind() == reflect.Pointer && !dest.IsNil() && stmt.Model == stmt.Dest
}
