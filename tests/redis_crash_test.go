package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/tests/internal/servers"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// startConsumers starts the consumers of the transport: two asynq servers,
// or two consumers of the stream's group.
func startConsumers(t *testing.T, transport string, d *database, redisAddr string) *workload.Consumers {
	t.Helper()
	if transport == workload.Asynq {
		return workload.StartAsynqServers(t, d.db, redisAddr, 2)
	}
	return workload.StartStreamConsumers(t, d.db, redisAddr, 2)
}

// Scenario 2: Redis (AOF, fsync always) is killed with SIGKILL (twice;
// once for asynq) while writers, three relays (two in this process, one in
// its own; one on SQLite) and two consumers run, and restarted a few
// seconds later. Afterwards every committed event has exactly one effect
// and nothing is dead, neither in the outbox nor in the consumers.
func TestRedisKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ transport, dialect string }{
		{workload.Asynq, workload.Postgres},
		{workload.Stream, workload.MySQL},
		{workload.Stream, workload.SQLite},
	} {
		t.Run(tc.transport+"/"+tc.dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, tc.dialect)
			rs := servers.StartRedis(t, servers.AOFAlways)
			cons := startConsumers(t, tc.transport, d, rs.Addr())
			cfg := workload.RelayConfig{Dialect: tc.dialect, DSN: d.dsn, Transport: tc.transport, RedisAddr: rs.Addr()}
			nIn, nSub := 2, 1
			if tc.dialect == workload.SQLite {
				nIn, nSub = 1, 0 // SQLite runs one relay
			}
			relays := startFleet(t, d.db, cfg, nIn, nSub)
			w := workload.StartWriters(d.db, workload.WriterConfig{Pause: 20 * time.Millisecond})
			// asynq may then need a minute to recover tasks (see
			// recoverAsynq): one kill keeps it within the time budget.
			kills := 2
			if tc.transport == workload.Asynq {
				kills = 1
			}
			for range kills {
				pause(3 * time.Second)
				rs.Crash(t)
				pause(2 * time.Second)
				rs.Restart(t)
			}
			lastFault := time.Now()
			pause(3 * time.Second)
			faults := fmt.Sprintf("%d SIGKILLs of Redis", kills)
			w.Stop()
			if tc.transport == workload.Asynq && recoverAsynq(t, d.db, cons, lastFault) {
				faults += "; asynq servers restarted 61s after the last kill to recover tasks left active"
			}
			finish(t, d.db, relays, w, ending{scenario: "Redis killed", dialect: tc.dialect, transport: tc.transport,
				faults: faults, start: start, lastFault: lastFault, consumers: cons})
		})
	}
}

// recoverAsynq deals with the tasks asynq leaves "active" when Redis dies
// between recording a server's dequeue (fsynced to the AOF) and replying
// to it: no server holds them, and asynq's recoverer takes such a task back
// only once its lease (30s from the dequeue) has been expired for 30s, in
// a pass that runs once a minute. The test waits until such tasks are
// recoverable and restarts the asynq servers, whose recoverer runs when
// they start, rather than waiting up to another minute. It reports whether
// it had to.
func recoverAsynq(t *testing.T, db *gorm.DB, cons *workload.Consumers, lastKill time.Time) bool {
	t.Helper()
	for time.Now().Before(lastKill.Add(61 * time.Second)) {
		if workload.Drained(db, 0) {
			return false
		}
		pause(500 * time.Millisecond)
	}
	t.Log("events still without effect 61s after the last kill of Redis: restarting the asynq servers so that their recoverer runs now")
	if err := cons.Restart(); err != nil {
		t.Fatalf("restarting the asynq servers: %v", err)
	}
	return true
}

// What does not hold: a Redis that persists nothing loses, on SIGKILL,
// tasks and stream entries it had acknowledged. The relay marked those
// events published, so nothing delivers them again. This test shows the
// loss (it fails if the events survive), so that the guarantees matrix
// states it from a run rather than from belief.
func TestRedisWithoutPersistenceLosesAcknowledgedEvents(t *testing.T) {
	t.Parallel()
	d := startDatabase(t, workload.SQLite)
	rs := servers.StartRedis(t, servers.NoPersistence)
	const n = 200
	w := workload.StartWriters(d.db, workload.WriterConfig{Limit: n})
	<-w.Done()
	relays := startFleet(t, d.db, workload.RelayConfig{Dialect: workload.SQLite, DSN: d.dsn, Transport: workload.Stream, RedisAddr: rs.Addr()}, 1, 0)
	workload.WaitPublished(t, d.db, 30*time.Second)
	relays.stop(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if l, err := rdb.XLen(context.Background(), workload.StreamName).Result(); err != nil || l < n {
		t.Fatalf("stream holds %d entries (%v) before the kill, want %d", l, err, n)
	}
	rs.Crash(t)
	rs.Restart(t)
	cons := startConsumers(t, workload.Stream, d, rs.Addr())
	pause(2 * time.Second)
	cons.Stop()
	rep := workload.Check(&lossRecorder{T: t}, d.db, workload.Expect{})
	if rep.Lost != rep.Committed {
		t.Errorf("%d of %d events lost; expected a Redis without persistence to lose all of them", rep.Lost, rep.Committed)
	}
	t.Logf("SUMMARY | Redis without persistence killed | sqlite | stream | relays 1 | events %d | faults: 1 SIGKILL after publishing | effects %d | lost %d (expected: the outbox marked them published) |",
		rep.Committed, rep.Effects, rep.Lost)
}

// lossRecorder turns Check's failures into log lines: here the losses are
// expected.
type lossRecorder struct{ *testing.T }

func (l *lossRecorder) Errorf(format string, args ...any) { l.Logf("expected: "+format, args...) }
