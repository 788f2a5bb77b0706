package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gormoutbox/outbox"
)

// ErrWALSlotLost is returned by Start, wrapped with outbox.ErrWALNotReady,
// when the replication slot of WAL mode was invalidated (its wal_status is
// lost: the server removed WAL it still needed, past
// max_slot_wal_keep_size): the events written since its last confirmed
// position are lost. The relay logs it at error level and stops rather
// than go on silently. Drop the slot and create it anew (`outbox migrate
// --drop-wal`, then `outbox migrate --wal`) once the loss is dealt with.
var ErrWALSlotLost = errors.New("relay: the WAL mode's replication slot was invalidated; events were lost")

// walStreamer is the WAL mode service: it streams the slot of the outbox
// table's WAL mode (outbox.WAL) on a replication connection, delivers the
// events of each committed transaction in commit order, moves those that
// fail (and the later events of their keys) into the outbox table, and
// confirms the slot's position past transactions whose every event is
// settled. PostgreSQL lets one connection stream a slot at a time: the
// relays that find it in use stand by and retry every second, and the
// first to retry after the streaming relay died takes over.
type walStreamer struct {
	r      *Relay
	setup  outbox.WALSetup
	dsn    string
	totals *counters
	fatal  func(error) // stops Start with the error

	txs       chan *walTx
	settled   atomic.Uint64 // the end of the last transaction settled
	streaming atomic.Bool
	oldest    oldestTx // commit times of the transactions received and not settled

	cancel context.CancelFunc
	done   chan struct{}
}

// newWALStreamer returns the service of r in WAL mode, or nil in table
// mode.
func newWALStreamer(r *Relay, totals *counters, fatal func(error)) *walStreamer {
	setup, ok := outbox.WALOf(r.db)
	if !ok {
		return nil
	}
	dsn := r.cfg.replicationDSN
	if dsn == "" {
		dsn = ownDSN(r.db)
	}
	return &walStreamer{r: r, setup: setup, dsn: dsn, totals: totals, fatal: fatal, done: make(chan struct{})}
}

// start runs the streamer until stop or ctx's end.
func (s *walStreamer) start(ctx context.Context, wg *sync.WaitGroup) {
	if s == nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	if s.dsn == "" {
		s.r.log.Error("WAL mode: no DSN to open a replication connection from (the dialector was given an open pool): set relay.WithReplicationDSN; the slot is not streamed",
			"slot", s.setup.Slot)
		close(s.done)
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(s.done)
		s.run(ctx)
	}()
}

// stop ends the streaming once the batch in hand is settled.
func (s *walStreamer) stop() {
	if s == nil || s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
}

// The outcomes of a streaming session that decide what the streamer does
// next.
var (
	errSlotActive  = errors.New("the slot is streamed by another connection")
	errSlotLost    = errors.New("the slot was invalidated")
	errSlotMissing = errors.New("the slot is missing")
)

// run streams sessions one after the other: standby while another relay
// streams, a pause after a failure, and a stop on an invalidated slot.
func (s *walStreamer) run(ctx context.Context) {
	pause, standby, streamed := time.Second, false, false
	for ctx.Err() == nil {
		err := s.session(ctx, &streamed)
		s.streaming.Store(false)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errSlotMissing) && !streamed:
			s.r.log.Error("WAL mode: the replication slot does not exist: run outbox.Migrate (or `outbox migrate --wal`), or remove WAL mode from this relay's configuration; the relay stops",
				"slot", s.setup.Slot)
			s.fatal(fmt.Errorf("%w: relay: the replication slot %s does not exist: run outbox.Migrate (or `outbox migrate --wal`)", outbox.ErrWALNotReady, s.setup.Slot))
			return
		case errors.Is(err, errSlotMissing):
			err = fmt.Errorf("%w: %w (dropped while this relay streamed it)", errSlotLost, err)
			fallthrough
		case errors.Is(err, errSlotLost):
			lost := fmt.Errorf("%w: %w: slot %s: %v", outbox.ErrWALNotReady, ErrWALSlotLost, s.setup.Slot, err)
			s.r.log.Error("WAL mode: THE REPLICATION SLOT WAS INVALIDATED: events committed since its last confirmed position are lost; the relay stops",
				"slot", s.setup.Slot, "error", err)
			s.fatal(lost)
			return
		case errors.Is(err, errSlotActive):
			if !standby {
				s.r.log.Info("WAL mode: another relay streams the slot; standby", "slot", s.setup.Slot, "retry", time.Second)
			}
			standby, pause = true, time.Second
		case err != nil:
			standby = false
			s.r.log.Warn("WAL mode: streaming stopped; retrying", "slot", s.setup.Slot, "error", err, "retry_in", pause)
			pause = min(2*pause, 30*time.Second)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if err == nil {
			pause = time.Second
		}
	}
}

// session streams the slot on one replication connection until it fails
// or ctx ends, with a deliverer running beside the reader.
func (s *walStreamer) session(ctx context.Context, streamed *bool) error {
	if err := s.checkSlot(ctx); err != nil {
		return err
	}
	blocked, err := s.loadBlocked(ctx)
	if err != nil {
		return err
	}
	conn, err := s.startStream(ctx)
	if err != nil {
		return classifyStreamErr(err)
	}
	defer conn.Close(context.Background())
	s.streaming.Store(true)
	*streamed = true
	s.r.log.Info("WAL mode: streaming the slot", "slot", s.setup.Slot, "keys_waiting_in_table", len(blocked))
	sctx, cancel := context.WithCancel(ctx)
	s.txs = make(chan *walTx, 256)
	d := &walDeliverer{s: s, blocked: blocked}
	delivered := make(chan error, 1)
	go func() { delivered <- d.run(sctx) }()
	go s.keepStatus(sctx)
	rd := &reader{s: s, conn: conn}
	err = rd.read(sctx)
	cancel()
	if derr := <-delivered; err == nil {
		err = derr
	}
	s.oldest.reset()
	if ctx.Err() == nil && err != nil {
		if lerr := s.checkSlot(context.WithoutCancel(ctx)); errors.Is(lerr, errSlotLost) || errors.Is(lerr, errSlotMissing) {
			return lerr
		}
	}
	return classifyStreamErr(err)
}

// classifyStreamErr maps the server's refusals to errSlotActive and
// errSlotLost.
func classifyStreamErr(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "55006": // object_in_use: "replication slot … is active for PID …"
		return fmt.Errorf("%w: %v", errSlotActive, err)
	case "55000": // "can no longer get changes from replication slot …"
		if strings.Contains(pe.Message, "no longer") || strings.Contains(pe.Message, "invalidated") {
			return fmt.Errorf("%w: %v", errSlotLost, err)
		}
	}
	return err
}

// received notes the commit time of a transaction handed to the deliverer.
func (s *walStreamer) received(tx *walTx) { s.oldest.add(tx) }

// oldestTx keeps the commit times of the transactions received and not
// yet settled, in commit order: the first is the oldest unconfirmed
// commit.
type oldestTx struct {
	mu   sync.Mutex
	txs  []*walTx
	last time.Time // the commit time of the last transaction settled
}

func (o *oldestTx) add(tx *walTx) {
	o.mu.Lock()
	o.txs = append(o.txs, tx)
	o.mu.Unlock()
}

// settle drops the transactions up to tx.
func (o *oldestTx) settle(tx *walTx) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.txs) > 0 && o.txs[0].end <= tx.end {
		o.txs = o.txs[1:]
	}
	o.last = tx.commit
}

func (o *oldestTx) reset() {
	o.mu.Lock()
	o.txs = nil
	o.mu.Unlock()
}

// first returns the commit time of the oldest transaction not settled (zero:
// none).
func (o *oldestTx) first() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.txs) == 0 {
		return time.Time{}
	}
	return o.txs[0].commit
}
