// Package tests is the fault-injection suite: each test starts its own
// throw-away servers (PostgreSQL, MariaDB, Redis), runs writers and relays
// against them, kills, freezes, cuts or skews something, and checks the
// guarantees once the faults stop. tests/GUARANTEES.md holds the results.
package tests

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/tests/internal/servers"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

func TestMain(m *testing.M) {
	workload.RelayMain() // a relay process: runs and exits
	workload.QuietMySQL()
	// Most of a scenario's time is spent waiting (for a lease to expire, a
	// server to restart, a fault window to end): run three scenarios at
	// once rather than one per core, unless -parallel says otherwise.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "3")
	}
	code := m.Run()
	servers.RemoveTemplates()
	os.Exit(code)
}

// database is a throw-away server of one dialect (or an SQLite file) and
// the test's connection to it.
type database struct {
	dialect string
	dsn     string
	db      *gorm.DB
	pg      *servers.Postgres
	maria   *servers.MariaDB
}

// startDatabase starts a server of the dialect, creates the tables and
// opens the test's connection.
func startDatabase(t *testing.T, dialect string, opts ...servers.Option) *database {
	t.Helper()
	d := &database{dialect: dialect}
	switch dialect {
	case workload.Postgres:
		d.pg = servers.StartPostgres(t, opts...)
		d.dsn = d.pg.DSN()
	case workload.MySQL:
		d.maria = servers.StartMariaDB(t, opts...)
		d.dsn = d.maria.DSN()
	case workload.SQLite:
		d.dsn = workload.SQLiteDSN(filepath.Join(t.TempDir(), "outbox.db"))
	}
	d.db = open(t, dialect, d.dsn)
	if err := workload.Setup(t.Context(), d.db); err != nil {
		t.Fatal(err)
	}
	return d
}

// open opens dsn for the test, closed when t ends.
func open(t *testing.T, dialect, dsn string) *gorm.DB {
	t.Helper()
	db, err := workload.OpenDB(dialect, dsn)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// addr is the server's address.
func (d *database) addr() string {
	if d.pg != nil {
		return d.pg.Addr()
	}
	return d.maria.Addr()
}

// dsnAt is the DSN of the database through another address (a proxy).
func (d *database) dsnAt(addr string) string {
	if d.pg != nil {
		return d.pg.DSNAt(addr)
	}
	return d.maria.DSNAt(addr)
}

// crash kills the database server (PostgreSQL: immediate stop; MariaDB:
// SIGKILL).
func (d *database) crash(t *testing.T) {
	t.Helper()
	switch {
	case d.pg != nil:
		d.pg.Crash(t)
	case d.maria != nil:
		d.maria.Crash(t)
	default:
		t.Fatal("no server to crash")
	}
}

func (d *database) restart(t *testing.T) {
	t.Helper()
	switch {
	case d.pg != nil:
		d.pg.Restart(t)
	case d.maria != nil:
		d.maria.Restart(t)
	}
}

// fleet is the relays of a scenario: some in this process, some in
// processes of their own.
type fleet struct {
	inproc []*workload.Relay
	procs  []*workload.RelayProc
	calls  *workload.Calls // handler calls of the in-process relays

	supervising sync.WaitGroup
	stopping    atomic.Bool
	restarts    atomic.Int64
	exits       sync.Map // name -> []error: how relay processes exited
	started     sync.Map // name -> time.Time: when supervise last restarted it
}

// upFor returns the relay processes that have been running for d at least
// (since startFleet or their last restart).
func (f *fleet) upFor(d time.Duration) []*workload.RelayProc {
	var up []*workload.RelayProc
	for _, p := range f.procs {
		at, ok := f.started.Load(p.Name)
		if p.Running() && (!ok || time.Since(at.(time.Time)) >= d) {
			up = append(up, p)
		}
	}
	return up
}

// startFleet starts nIn relays in this process on db and nSub relay
// processes, all configured from base (named in-N and sub-N).
func startFleet(t *testing.T, db *gorm.DB, base workload.RelayConfig, nIn, nSub int) *fleet {
	t.Helper()
	f := &fleet{calls: workload.NewCalls()}
	for i := range nIn {
		cfg := base
		cfg.Name = fmt.Sprintf("in-%d", i)
		f.inproc = append(f.inproc, workload.StartRelay(t, db, cfg, f.calls))
	}
	for i := range nSub {
		cfg := base
		cfg.Name = fmt.Sprintf("sub-%d", i)
		f.procs = append(f.procs, workload.SpawnRelay(t, cfg))
	}
	f.waitReady(t, db)
	return f
}

// waitReady waits until every relay has recorded its first heartbeat, so
// that faults hit running relays (a relay process takes a moment to start).
func (f *fleet) waitReady(t *testing.T, db *gorm.DB) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var ids []string
		_ = db.Raw(`SELECT id FROM outbox_events_relays`).Scan(&ids).Error
		missing := 0
		for _, name := range f.names() {
			if !slices.ContainsFunc(ids, func(id string) bool { return strings.HasPrefix(id, name+"-") }) {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d relays did not start within 90s", missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *fleet) names() []string {
	var n []string
	for _, r := range f.inproc {
		n = append(n, r.Name)
	}
	for _, p := range f.procs {
		n = append(n, p.Name)
	}
	return n
}

func (f *fleet) size() int { return len(f.inproc) + len(f.procs) }

// checkRunning fails t for every relay that has stopped.
func (f *fleet) checkRunning(t *testing.T) {
	t.Helper()
	for _, r := range f.inproc {
		if !r.Running() {
			t.Errorf("in-process relay %s stopped", r.Name)
		}
	}
	for _, p := range f.procs {
		if !p.Running() {
			t.Errorf("relay process %s exited: %v\n%s", p.Name, p.ExitErr(), servers.Tail(p.Log(), 20))
		}
	}
}

// supervise restarts each relay process after it exits (killed, or
// crashed by a poison event), after a short pause, until stop.
func (f *fleet) supervise(t *testing.T) {
	t.Helper()
	// A test that ends early (t.Fatal before stop) must not have its relays
	// restarted afterwards, nor be failed from here once it has ended: that
	// panics the whole test binary and hides the test's own failure.
	t.Cleanup(func() { f.stopping.Store(true) })
	for _, p := range f.procs {
		f.supervising.Go(func() {
			for {
				<-p.Exited()
				if f.stopping.Load() {
					return
				}
				old, _ := f.exits.LoadOrStore(p.Name, []error{})
				f.exits.Store(p.Name, append(old.([]error), p.ExitErr()))
				time.Sleep(200 * time.Millisecond)
				if f.stopping.Load() {
					return
				}
				if err := p.Start(); err != nil {
					if !f.stopping.Load() && t.Context().Err() == nil {
						t.Errorf("restarting relay %s: %v", p.Name, err)
					}
					return
				}
				f.started.Store(p.Name, time.Now())
				f.restarts.Add(1)
			}
		})
	}
}

// exitCodes returns the exit statuses of the relay processes' exits seen by
// supervise.
func (f *fleet) exitCodes() []int {
	var codes []int
	f.exits.Range(func(_, v any) bool {
		for _, err := range v.([]error) {
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			codes = append(codes, code)
		}
		return true
	})
	return codes
}

// logTransactions logs the database's open transactions: what holds the
// locks a wedged relay waits for?
func logTransactions(t *testing.T, db *gorm.DB) {
	t.Helper()
	q := `SELECT trx_id, trx_state, trx_started, trx_mysql_thread_id, trx_query, trx_rows_locked FROM information_schema.innodb_trx`
	if db.Dialector.Name() == workload.Postgres {
		q = `SELECT pid, state, xact_start, wait_event_type, wait_event, left(query, 200) AS query FROM pg_stat_activity
			WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()`
	} else if db.Dialector.Name() != workload.MySQL {
		return
	}
	var rows []map[string]any
	if err := db.Raw(q).Scan(&rows).Error; err != nil {
		t.Logf("reading open transactions: %v", err)
		return
	}
	for _, r := range rows {
		t.Logf("open transaction: %v", r)
	}
}

// dump makes the named relay processes print their goroutines (SIGQUIT)
// and logs them: why is a relay wedged?
func (f *fleet) dump(t *testing.T, names []string) {
	t.Helper()
	for _, p := range f.procs {
		if !slices.Contains(names, p.Name) || p.Signal(syscall.SIGQUIT) != nil {
			continue
		}
		p.Wait(10 * time.Second)
		t.Logf("goroutines of the wedged relay %s:\n%s", p.Name, servers.Tail(p.Log(), 600))
	}
	for _, r := range f.inproc {
		if slices.Contains(names, r.Name) {
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Logf("goroutines of this process (the wedged relay %s among them):\n%s", r.Name, b.String())
			return
		}
	}
}

// stop stops every relay cleanly and fails t if one does not.
func (f *fleet) stop(t *testing.T) {
	t.Helper()
	f.stopping.Store(true)
	for _, p := range f.procs {
		_ = p.Signal(syscall.SIGCONT) // a frozen one must hear SIGTERM
	}
	for _, r := range f.inproc {
		if err := r.Stop(); err != nil {
			t.Errorf("relay %s: Start returned %v", r.Name, err)
		}
	}
	for _, p := range f.procs {
		if !p.Running() {
			continue // checkRunning reported it
		}
		if err := p.Terminate(30 * time.Second); err != nil {
			t.Errorf("relay process %s: %v", p.Name, err)
		}
	}
	f.supervising.Wait()
}

// pause sleeps d.
func pause(d time.Duration) { time.Sleep(d) }

// ending is what a scenario says about its run when the faults are over.
type ending struct {
	scenario, dialect, transport string
	faults                       string // what was injected
	expect                       workload.Expect
	start, lastFault             time.Time
	drain                        time.Duration // how long the backlog may go without shrinking (default 60s; 4× in all)
	consumers                    *workload.Consumers
}

// drainAfterWriters stops the writers, if any, and waits for the backlog
// to drain (e.drain without shrinking, 60s by default); it returns e's
// faults with the writers' failures.
func drainAfterWriters(t *testing.T, db *gorm.DB, w *workload.Writers, e ending) string {
	t.Helper()
	faults := e.faults
	if w != nil {
		ws := w.Stop()
		faults += fmt.Sprintf("; %d writer transactions failed", ws.Failed)
		if ws.LastErr != nil {
			t.Logf("last writer error: %v", ws.LastErr)
		}
	}
	if e.drain == 0 {
		e.drain = 60 * time.Second
	}
	workload.WaitDrained(t, db, e.drain, len(e.expect.Dead))
	return faults
}

// finish stops the writers, waits for the backlog to drain, checks the
// guarantees, checks that every relay still delivers, stops the relays
// and logs the summary line.
func finish(t *testing.T, db *gorm.DB, relays *fleet, w *workload.Writers, e ending) workload.Report {
	t.Helper()
	faults := drainAfterWriters(t, db, w, e)
	if !workload.Drained(db, len(e.expect.Dead)) {
		logTransactions(t, db) // what holds the locks the stuck events wait for?
	}
	recovered := time.Since(e.lastFault)
	if e.consumers != nil {
		e.expect.Explain = e.consumers.Explain
	}
	rep := workload.Check(t, db, e.expect)
	if e.consumers != nil && e.consumers.Dead() > 0 {
		t.Errorf("%d messages went dead in the consumers", e.consumers.Dead())
	}
	if relays != nil {
		beats, probing := workload.ReadBeats(t, db), time.Now()
		missing := workload.Probe(t, db, relays.names(), 30*time.Second)
		if stalled := beats.WaitAdvanced(t, db, relays.names(), 30*time.Second); len(stalled) > 0 {
			t.Errorf("the heartbeats of relays %v did not advance in %v: their heartbeater is wedged", stalled,
				time.Since(probing).Round(100*time.Millisecond))
			missing = append(missing, stalled...)
		}
		if len(missing) > 0 {
			logTransactions(t, db)
			relays.dump(t, missing)
		}
		relays.checkRunning(t)
		relays.stop(t)
	}
	n := 0
	if relays != nil {
		n = relays.size()
	}
	workload.Summary{Scenario: e.scenario, Dialect: e.dialect, Transport: e.transport, Relays: n, Faults: faults,
		Report: rep, Recover: recovered, Total: time.Since(e.start)}.Log(t)
	return rep
}
