package outbox

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
)

// ErrWALNotReady is wrapped by the errors of db.Use (a Plugin with WAL
// set) and of the relay when the server cannot run WAL mode as
// configured: not PostgreSQL 14 or later, wal_level not logical, the
// replication slot or its publication missing, or the slot invalidated.
// The message names the fix.
var ErrWALNotReady = errors.New("outbox: WAL mode not ready")

// WAL turns on WAL mode (Plugin.WAL), on PostgreSQL 14 and later only.
//
// In WAL mode Emit, Recorder and Track write each event as a
// transactional logical decoding message in the caller's transaction
// (see WALMessage for the format) instead of a row of the outbox table,
// and the relays (package relay) stream the messages from a logical
// replication slot, in commit order, one relay streaming at a time. An
// event whose delivery fails moves to the outbox table, where the table's
// retries, backoff, dead letters, admin page and CLI take over; the
// relays keep delivering the table's rows as in table mode. See the
// README's WAL mode section and relay's package documentation.
//
// What an event's ID means in WAL mode: messages have no unique index, so
// writing an ID again is not a no-op (nor ErrDuplicateEvent): each write
// is delivered, under the same ID, and consumers drop the repetition by
// ID as they drop a redelivery (asynq's TaskID, NATS's Nats-Msg-Id, the
// idempotency records). A Recorder's events written again after a save
// whose outcome was unknown are therefore delivered twice under one ID.
//
// Migrate (or `outbox migrate --wal`) creates the slot and its
// publication; db.Use refuses a server whose wal_level is not logical, or
// that lacks the slot, so that no event is written before its slot exists.
type WAL struct {
	// Slot is the logical replication slot (default: the outbox table's
	// name followed by "_wal"). A plain identifier of at most 63
	// characters.
	Slot string
	// Publication is the slot's publication (default: the slot's name). It
	// publishes the outbox table's inserts, which tell the streaming relay
	// which partition keys have events waiting in the table.
	Publication string
	// Drain writes events to the table again (table mode) while the relays
	// still stream what the slot holds: the first step of switching back to
	// table mode. Once `outbox stats` shows the slot with nothing left to
	// stream, remove WAL and drop the slot (DropWAL, `outbox migrate
	// --drop-wal`).
	Drain bool
}

// walNames returns the slot and publication of w for table, checked.
func (w *WAL) names(table string) (slot, pub string, err error) {
	slot, pub = w.Slot, w.Publication
	if slot == "" {
		slot = table + "_wal"
	}
	if pub == "" {
		pub = slot
	}
	if err := dialect.CheckIdent(slot, 63); err != nil {
		return "", "", fmt.Errorf("%w: WAL.Slot: %v", ErrInvalidConfig, err)
	}
	if err := dialect.CheckIdent(pub, 63); err != nil {
		return "", "", fmt.Errorf("%w: WAL.Publication: %v", ErrInvalidConfig, err)
	}
	return slot, pub, nil
}

// WALSetup is the WAL mode of a Plugin as the relay needs it.
type WALSetup struct {
	Table, Slot, Publication, Prefix string
	// Drain: the writers write to the table; the slot is streamed until
	// it holds nothing more.
	Drain bool
}

// WALOf returns the WAL mode of the Plugin installed on db, or ok false
// when there is none (table mode, or no Plugin).
func WALOf(db *gorm.DB) (setup WALSetup, ok bool) {
	p, err := Lookup(db)
	if err != nil || p.WAL == nil {
		return WALSetup{}, false
	}
	slot, pub, err := p.WAL.names(p.Table())
	if err != nil {
		return WALSetup{}, false
	}
	return WALSetup{Table: p.Table(), Slot: slot, Publication: pub, Prefix: WALPrefix(p.Table()), Drain: p.WAL.Drain}, true
}

// checkWALConfig checks a Plugin's WAL mode w (nil: table mode) for a
// database of kind and the outbox table: PostgreSQL only, names valid.
func checkWALConfig(w *WAL, kind dialect.Kind, table string) error {
	if w == nil {
		return nil
	}
	if kind != dialect.Postgres {
		return fmt.Errorf("%w: %w: WAL mode needs PostgreSQL 14 or later; this database is %s (use table mode: leave Plugin.WAL nil)",
			ErrInvalidConfig, ErrWALNotReady, kind)
	}
	_, _, err := w.names(table)
	return err
}

// checkWAL refuses, on Use, a server that cannot take the events of WAL
// mode: before PostgreSQL 14, wal_level not logical, the slot or the
// publication missing or the slot invalidated. In Drain mode writes go
// to the table and nothing is checked.
func (p *Plugin) checkWAL(db *gorm.DB) error {
	if p.WAL == nil || p.WAL.Drain {
		return nil
	}
	slot, pub, err := p.WAL.names(p.table)
	if err != nil {
		return err
	}
	var st struct {
		Version  int
		WALLevel string
		Plugin   *string
		Status   *string
		SameDB   bool
		HasPub   bool
	}
	err = db.Session(&gorm.Session{NewDB: true}).Raw(`SELECT current_setting('server_version_num')::int AS version,
		current_setting('wal_level') AS wal_level, s.plugin, s.wal_status AS status,
		COALESCE(s.database = current_database(), false) AS same_db,
		EXISTS (SELECT 1 FROM pg_publication WHERE pubname = ?) AS has_pub
		FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = ?`, pub, slot).Scan(&st).Error
	if err != nil {
		return fmt.Errorf("outbox: checking WAL mode: %w", err)
	}
	return walReady(st.Version, st.WALLevel, slot, pub, st.Plugin, st.Status, st.SameDB, st.HasPub)
}

// walReady names what keeps a server from WAL mode, or returns nil.
func walReady(version int, level, slot, pub string, plugin, status *string, sameDB, hasPub bool) error {
	if err := walServerReady(version, level); err != nil {
		return err
	}
	switch {
	case plugin == nil:
		return fmt.Errorf("%w: the replication slot %s does not exist: run outbox.Migrate (or `outbox migrate --wal`) before writing events", ErrWALNotReady, slot)
	case *plugin != "pgoutput" || !sameDB:
		return fmt.Errorf("%w: the replication slot %s is not a pgoutput slot of this database: drop it, or name another slot in WAL.Slot", ErrWALNotReady, slot)
	case status != nil && *status == "lost":
		return fmt.Errorf("%w: the replication slot %s was invalidated (wal_status lost, max_slot_wal_keep_size exceeded): events written since its last confirmed position are lost; drop it (outbox migrate --drop-wal) and run outbox migrate --wal again", ErrWALNotReady, slot)
	case !hasPub:
		return fmt.Errorf("%w: the publication %s does not exist: run outbox.Migrate (or `outbox migrate --wal`)", ErrWALNotReady, pub)
	}
	return nil
}

// walServerReady names what keeps a server from WAL mode, or returns nil.
func walServerReady(version int, level string) error {
	switch {
	case version < 140000:
		return fmt.Errorf("%w: WAL mode needs PostgreSQL 14 or later; this server is %d.%d", ErrWALNotReady, version/10000, version%10000/100)
	case level != "logical":
		return fmt.Errorf("%w: wal_level is %s: set wal_level = logical in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart the server", ErrWALNotReady, level)
	}
	return nil
}
