package relay

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// counters are the running totals a relay reports in its heartbeats.
type counters struct {
	claimed, published, failed, dead, released, lost atomic.Int64
}

// add counts the outcomes of r; claims are counted as they happen.
func (c *counters) add(r Result) {
	c.published.Add(int64(r.Published))
	c.released.Add(int64(r.Released))
	c.failed.Add(int64(r.Failed))
	c.dead.Add(int64(r.Dead))
	c.lost.Add(int64(r.Lost))
}

// Describer is implemented by publishers that can say where they deliver,
// such as "asynq queue default (or the event's Topic)" or "redis stream
// outbox". Relays record the description in their heartbeats, and GetStats
// (and "outbox stats") show it, so that two relays of one table that
// deliver to different places are seen. The adapters implement it; a
// publisher that does not is described by its Go type.
type Describer interface {
	Describe() string
}

// maxDescription is the size of the relays table's publisher column.
const maxDescription = 255

// describe returns what the heartbeats record of pub.
func describe(pub Publisher) string {
	d := fmt.Sprintf("%T", pub)
	if x, ok := pub.(Describer); ok {
		d = x.Describe()
	}
	if r := []rune(d); len(r) > maxDescription {
		d = string(r[:maxDescription-1]) + "…"
	}
	return d
}

// heartbeat records the relay in <table>_relays every interval until ctx
// ends, then removes its row.
func (r *Relay) heartbeat(ctx context.Context, started time.Time, totals *counters) {
	host, _ := os.Hostname()
	publisher := describe(r.pub)
	warned := false
	beat := func(ctx context.Context) {
		b := r.kind.NewBuilder()
		b.Add("INSERT INTO "+r.table+"_relays (id, host, pid, publisher, heartbeat_ms, started_at, last_beat, claimed, published, failed, dead, lost) VALUES (?, ?, ?, ?, ?, ?, ",
			r.cfg.workerID, host, os.Getpid(), publisher, r.cfg.heartbeat.Milliseconds(), r.kind.Time(started))
		b.Now()
		b.Add(", ?, ?, ?, ?, ?)", totals.claimed.Load(), totals.published.Load(), totals.failed.Load(), totals.dead.Load(), totals.lost.Load())
		b.Add(r.kind.Upsert("id", "host", "pid", "publisher", "heartbeat_ms", "started_at", "last_beat", "claimed", "published", "failed", "dead", "lost"))
		if err := r.db.WithContext(ctx).Exec(b.SQL(), b.Args()...).Error; err != nil && ctx.Err() == nil {
			if !warned {
				r.log.Warn("heartbeat failed (is the relays table migrated? run outbox.Migrate or 'outbox migrate')", "error", err)
				warned = true
			}
			return
		}
		warned = false
	}
	beat(ctx)
	t := time.NewTicker(r.cfg.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := r.db.WithContext(dctx).Exec("DELETE FROM "+r.table+"_relays WHERE id = ?", r.cfg.workerID).Error; err != nil {
				r.log.Warn("removing the heartbeat failed", "error", err)
			}
			return
		case <-t.C:
			beat(ctx)
		}
	}
}

// RelayStatus is one relay as its heartbeats describe it.
type RelayStatus struct {
	ID   string `json:"id" gorm:"column:id"`
	Host string `json:"host" gorm:"column:host"`
	PID  int    `json:"pid" gorm:"column:pid"`
	// Publisher says where the relay delivers: its publisher's Describe
	// (see Describer), or the publisher's Go type. Relays of one table
	// with different publishers split its events between destinations.
	// Empty for a relay that predates the column.
	Publisher string    `json:"publisher" gorm:"column:publisher"`
	StartedAt time.Time `json:"started_at" gorm:"column:started_at"`
	LastBeat  time.Time `json:"last_beat" gorm:"column:last_beat"`
	// Heartbeat is how often the relay records itself (WithHeartbeat).
	Heartbeat time.Duration `json:"heartbeat_ns" gorm:"-"`
	// Age is how long ago the last heartbeat was, by the database clock.
	Age time.Duration `json:"age_ns" gorm:"-"`
	// Live is false once three heartbeats are missing: the relay died
	// without stopping cleanly, or cannot reach the database.
	Live bool `json:"live" gorm:"-"`
	// The relay's totals since it started, as of its last heartbeat: they
	// lag the relay's work by up to one heartbeat interval (the relay's
	// metrics are current).
	Claimed   int64 `json:"claimed" gorm:"column:claimed"`
	Published int64 `json:"published" gorm:"column:published"`
	Failed    int64 `json:"failed" gorm:"column:failed"`
	Dead      int64 `json:"dead" gorm:"column:dead"`
	Lost      int64 `json:"lost" gorm:"column:lost"`
}

// relays reads the heartbeats table; a missing table yields no relays,
// and one not yet migrated to the publisher column no publishers.
func (o *ops) relays() ([]RelayStatus, error) {
	relays := gormTable(o.kind, o.table+"_relays")
	if !o.tableExists(relays) {
		return nil, nil
	}
	var rows []struct {
		RelayStatus
		HeartbeatMS int64   `gorm:"column:heartbeat_ms"`
		AgeSeconds  float64 `gorm:"column:age_seconds"`
	}
	cols := "id, host, pid, heartbeat_ms, started_at, last_beat, claimed, published, failed, dead, lost, "
	if o.db.Migrator().HasColumn(relays, "publisher") {
		cols += "publisher, "
	}
	err := o.db.Table(relays).Select(cols + o.kind.SecondsSince("last_beat") + " AS age_seconds").Order("id").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("relay: reading heartbeats: %w", err)
	}
	out := make([]RelayStatus, len(rows))
	for i, row := range rows {
		s := row.RelayStatus
		s.Heartbeat = time.Duration(row.HeartbeatMS) * time.Millisecond
		s.StartedAt, s.LastBeat = o.kind.StoredTime(s.StartedAt), o.kind.StoredTime(s.LastBeat)
		s.Age = time.Duration(row.AgeSeconds * float64(time.Second))
		s.Live = s.Age < 3*s.Heartbeat
		out[i] = s
	}
	return out, nil
}

// pruneRelays deletes heartbeats a day old: relays long gone.
func (r *Relay) pruneRelays(ctx context.Context) error {
	s, a := r.kind.NowPlus(-24 * time.Hour)
	return r.db.WithContext(ctx).Exec("DELETE FROM "+r.table+"_relays WHERE last_beat < "+s, a...).Error
}
