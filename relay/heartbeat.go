package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

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

// heartbeater records the relay in <table>_relays every WithHeartbeat
// interval, with its running totals, until the context given to start
// ends or stop; then it removes the relay's row.
type heartbeater struct {
	r         *Relay
	totals    *counters
	started   time.Time
	host      string
	publisher string
	warned    bool          // a failed beat was logged: log the next failures no more
	role      func() string // WithSingleActive's role, "" without; nil: none
	pokes     chan struct{} // a beat now (the role changed)
	cancel    context.CancelFunc
	done      chan struct{}
}

func newHeartbeater(r *Relay, totals *counters) *heartbeater {
	return &heartbeater{r: r, totals: totals, pokes: make(chan struct{}, 1)}
}

// poke asks for a beat now, without waiting for it.
func (h *heartbeater) poke() {
	select {
	case h.pokes <- struct{}{}:
	default:
	}
}

// start starts beating, unless heartbeats are off (WithHeartbeat(0)).
func (h *heartbeater) start(ctx context.Context, wg *sync.WaitGroup) {
	if h.r.cfg.heartbeat <= 0 {
		return
	}
	h.started = time.Now()
	h.host, _ = os.Hostname()
	h.publisher = describe(h.r.pub)
	ctx, h.cancel = context.WithCancel(ctx)
	h.done = make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(h.done)
		h.run(ctx)
	}()
}

// stop ends the beats and returns once the relay's row is removed.
func (h *heartbeater) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
}

func (h *heartbeater) run(ctx context.Context) {
	h.beat(ctx)
	t := time.NewTicker(h.r.cfg.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.remove(ctx)
			return
		case <-t.C:
			h.beat(ctx)
		case <-h.pokes:
			h.beat(ctx)
		}
	}
}

// beat upserts the relay's row.
func (h *heartbeater) beat(ctx context.Context) {
	r, totals := h.r, h.totals
	publisher := h.publisher
	if h.role != nil {
		publisher = withRole(publisher, h.role())
	}
	b := r.kind.NewBuilder()
	b.Add("INSERT INTO "+r.table+"_relays (id, host, pid, publisher, heartbeat_ms, started_at, last_beat, claimed, published, failed, dead, lost, rescued) VALUES (?, ?, ?, ?, ?, ?, ",
		r.cfg.workerID, h.host, os.Getpid(), publisher, r.cfg.heartbeat.Milliseconds(), r.kind.Time(h.started))
	b.Now()
	b.Add(", ?, ?, ?, ?, ?, ?)", totals.claimed.Load(), totals.published.Load(), totals.failed.Load(), totals.dead.Load(), totals.lost.Load(),
		totals.rescued.Load())
	b.Add(r.kind.Upsert("id", "host", "pid", "publisher", "heartbeat_ms", "started_at", "last_beat", "claimed", "published", "failed", "dead", "lost", "rescued"))
	bctx, cancel := context.WithTimeout(ctx, max(r.cfg.heartbeat, minStatementTimeout))
	defer cancel()
	if err := r.db.WithContext(bctx).Exec(b.SQL(), b.Args()...).Error; err != nil && ctx.Err() == nil {
		if !h.warned {
			hint := "the database did not answer in time; the relay goes on and beats again"
			if !errors.Is(err, context.DeadlineExceeded) {
				hint = "is the relays table migrated? run outbox.Migrate or 'outbox migrate'"
			}
			r.log.Warn("heartbeat failed ("+hint+")", "error", err)
			h.warned = true
		}
		return
	}
	h.warned = false
}

// remove deletes the relay's row, within 5s of ctx's end.
func (h *heartbeater) remove(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.r.db.WithContext(dctx).Exec("DELETE FROM "+h.r.table+"_relays WHERE id = ?", h.r.cfg.workerID).Error; err != nil {
		h.r.log.Warn("removing the heartbeat failed", "error", err)
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
	Publisher string `json:"publisher" gorm:"column:publisher"`
	// Role is RoleActive or RoleStandby for a relay run WithSingleActive
	// (as of its last heartbeat; a change of role is recorded at once),
	// and empty for the others, which all claim.
	Role      string    `json:"role,omitempty" gorm:"-"`
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
	// Failed counts deliveries that failed and were scheduled for another
	// attempt; rescues of expired claims are counted in Rescued instead.
	Failed int64 `json:"failed" gorm:"column:failed"`
	Dead   int64 `json:"dead" gorm:"column:dead"`
	Lost   int64 `json:"lost" gorm:"column:lost"`
	// Rescued counts the expired claims (of relays that crashed, stalled
	// or gave a delivery up) this relay took back (Result.Rescued); 0 for
	// a relay that predates the column (migration 0011).
	Rescued int64 `json:"rescued" gorm:"column:rescued"`
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
	for _, c := range []string{"publisher", "rescued"} {
		if o.db.Migrator().HasColumn(relays, c) {
			cols += c + ", "
		}
	}
	err := o.db.Table(relays).Select(cols + o.kind.SecondsSince("last_beat") + " AS age_seconds").Order("id").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("relay: reading heartbeats: %w", err)
	}
	out := make([]RelayStatus, len(rows))
	for i, row := range rows {
		s := row.RelayStatus
		s.Publisher, s.Role = splitRole(s.Publisher)
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
