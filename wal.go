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
// guide docs/wal.md and relay's package documentation.
//
// What an event's ID means in WAL mode: messages have no unique index, so
// writing an ID again is not a no-op (nor ErrDuplicateEvent): each write
// is delivered, under the same ID, and consumers drop the repetition by
// ID as they drop a redelivery (asynq's TaskID, NATS's Nats-Msg-Id, the
// idempotency records). A Recorder's events written again after a save
// whose outcome was unknown are therefore delivered twice under one ID.
//
// No event is written before its slot exists: db.Use refuses a Plugin in
// WAL mode on a server whose wal_level is not logical, or that lacks the
// slot or its publication. Create them before db.Use, in one of these
// ways:
//
//	p := &outbox.Plugin{WAL: &outbox.WAL{}}
//	if err := p.Migrate(db); err != nil { ... } // tables, publication, slot
//	if err := db.Use(p); err != nil { ... }
//
// or set Plugin.AutoMigrate (Use then runs p.Migrate), or run `outbox
// migrate --wal` (with --table and --wal-slot when they are not the
// defaults). outbox.Migrate(db) sets up WAL mode only for a Plugin
// installed on db, which a refused Use is not; for the default table,
// outbox.Migrate(db) then outbox.MigrateWAL(db, w) works too.
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
	var st walState
	err = db.Session(&gorm.Session{NewDB: true}).Raw(`SELECT current_setting('server_version_num')::int AS version,
		current_setting('wal_level') AS wal_level, s.plugin, s.wal_status AS status,
		COALESCE(s.database = current_database(), false) AS same_db,
		EXISTS (SELECT 1 FROM pg_publication WHERE pubname = ?) AS has_pub
		FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = ?`, pub, slot).Scan(&st).Error
	if err != nil {
		return fmt.Errorf("outbox: checking WAL mode: %w", err)
	}
	return st.ready(p.table, slot, pub)
}

// walState is what checkWAL reads of the server, the slot and the
// publication.
type walState struct {
	Version  int
	WALLevel string
	Plugin   *string // the slot's output plugin; nil: no slot
	Status   *string // the slot's wal_status
	SameDB   bool    // the slot is of this database
	HasPub   bool    // the publication exists
}

// ready names what keeps the server from the WAL mode of table, slot and
// pub, and the fix, or returns nil.
func (st *walState) ready(table, slot, pub string) error {
	if err := walServerReady(st.Version, st.WALLevel); err != nil {
		return err
	}
	switch {
	case st.Plugin == nil:
		return fmt.Errorf("%w: the replication slot %s does not exist, and no event may be written before it does: %s",
			ErrWALNotReady, slot, walSetupFix(table, slot, pub))
	case *st.Plugin != "pgoutput" || !st.SameDB:
		return fmt.Errorf("%w: the replication slot %s is not a pgoutput slot of this database: drop it, or name another slot in WAL.Slot", ErrWALNotReady, slot)
	case st.Status != nil && *st.Status == "lost":
		return fmt.Errorf("%w: the replication slot %s was invalidated (wal_status lost, max_slot_wal_keep_size exceeded): events written since its last confirmed position are lost; drop it (SELECT pg_drop_replication_slot('%s'), or `outbox migrate --drop-wal%s`), then %s",
			ErrWALNotReady, slot, slot, walCLIFlags(table, slot), walSetupFix(table, slot, pub))
	case !st.HasPub:
		return fmt.Errorf("%w: the publication %s does not exist: %s", ErrWALNotReady, pub, walSetupFix(table, slot, pub))
	}
	return nil
}

// walSetupFix says how to create the slot and the publication of WAL mode
// for table: the ways that work although db.Use refused the Plugin (GORM
// does not install a Plugin whose Use failed, so that outbox.Migrate(db)
// would not find its WAL setting).
func walSetupFix(table, slot, pub string) string {
	fix := "create the slot and its publication before db.Use, with the same Plugin: set its AutoMigrate, or call its Migrate method (p.Migrate(db))"
	if table == DefaultTableName {
		fix += ", or call outbox.Migrate(db) then outbox.MigrateWAL(db, w) with the Plugin's WAL w"
	}
	if pub == slot { // the CLI names no publication: it uses the slot's name
		fix += ", or run `outbox migrate --wal" + walCLIFlags(table, slot) + "`"
	}
	return fix
}

// walCLIFlags are the flags of `outbox migrate` that name table and slot,
// when they are not the defaults.
func walCLIFlags(table, slot string) string {
	var flags string
	if table != DefaultTableName {
		flags += " --table " + table
	}
	if slot != table+"_wal" {
		flags += " --wal-slot " + slot
	}
	return flags
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
