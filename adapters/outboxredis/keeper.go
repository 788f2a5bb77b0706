package outboxredis

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// keeper keeps the entries this consumer holds (those of a batch waiting
// behind the ones being handled, those running, and those handed back
// until they are due again) its own. Every third of the min idle time it resets their idle
// time, for each entry only if it is still this consumer's (ownScript), so
// that another consumer's XAUTOCLAIM, which takes entries idle for the
// min idle time, does not adopt them while this one holds them. Before an
// entry runs, and before it is acknowledged, mine tells whether it may
// have been adopted after all (this process was frozen, or Redis out of
// reach, for longer than half the min idle time): such an entry is checked
// in Redis, and left alone if another consumer owns it now.
type keeper struct {
	t *transport

	mu   sync.Mutex
	held map[string]time.Time // entry id → when its idle time was last reset (before the command)
	lost map[string]bool      // held entries another consumer owns now
	stop func()               // adapterkit.Every's
}

// ownScript resets the idle time of the entries (ARGV[3…]) of the group
// ARGV[1] that consumer ARGV[2] still owns, without counting a delivery
// (XCLAIM … JUSTID), and returns their ids. KEYS[1] is the stream.
var ownScript = redis.NewScript(`
local mine = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    mine[#mine+1] = ARGV[i]
  end
end
return mine
`)

// ackOwnScript acknowledges entry ARGV[3] of group ARGV[1] and forgets
// its excused deliveries (KEYS[2]) if consumer ARGV[2] still owns it; it
// returns 1 if it did, 0 if another consumer owns the entry, and -1 if
// it is no longer pending. KEYS[1] is the stream.
var ackOwnScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return -1 end
if p[1][2] ~= ARGV[2] then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('HDEL', KEYS[2], ARGV[3])
return 1
`)

// newKeeper starts keeping t's held entries until close.
func newKeeper(t *transport) *keeper {
	k := &keeper{t: t, held: map[string]time.Time{}, lost: map[string]bool{}}
	k.stop = adapterkit.Every(max(t.cfg.minIdle/3, time.Millisecond), k.refresh)
	return k
}

// close stops the keeper, and returns once no refresh is running.
func (k *keeper) close() { k.stop() }

// hold keeps id, whose idle time was reset (delivered or claimed to this
// consumer) at the earliest at since.
func (k *keeper) hold(since time.Time, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if at, held := k.held[id]; !held || since.After(at) {
		k.held[id] = since
	}
	delete(k.lost, id)
}

// drop stops keeping id.
func (k *keeper) drop(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.held, id)
	delete(k.lost, id)
}

// dropAll stops keeping every entry.
func (k *keeper) dropAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.held)
	clear(k.lost)
}

// refresh resets the idle time of the held entries this consumer still
// owns, and marks the others lost.
func (k *keeper) refresh() {
	k.mu.Lock()
	ids := make([]string, 0, len(k.held))
	for id := range k.held {
		if !k.lost[id] {
			ids = append(ids, id)
		}
	}
	k.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(k.t.cfg.minIdle/3, 5*time.Second))
	defer cancel()
	k.own(ctx, ids)
}

// own runs ownScript for ids and records the result; it reports whether
// Redis answered.
func (k *keeper) own(ctx context.Context, ids []string) bool {
	t := k.t
	at := time.Now()
	argv := make([]any, 0, 2+len(ids))
	argv = append(argv, t.group, t.name)
	for _, id := range ids {
		argv = append(argv, id)
	}
	got, err := ownScript.Run(ctx, t.rdb, []string{t.stream}, argv...).StringSlice()
	if err != nil {
		t.log.Warn("outboxredis: cannot keep the entries this consumer holds its own; they may be adopted by another consumer",
			"entries", len(ids), "error", err)
		return false
	}
	mine := make(map[string]bool, len(got))
	for _, id := range got {
		mine[id] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		if _, held := k.held[id]; !held {
			continue
		}
		if mine[id] {
			k.held[id] = at
		} else {
			k.lost[id] = true
		}
	}
	return true
}

// mine reports whether id is still this consumer's: surely if its idle
// time was reset less than half the min idle time ago, else as Redis
// says (which also resets it). An entry Redis cannot tell about is
// treated as this consumer's: running it again is at least once.
func (k *keeper) mine(ctx context.Context, id string) bool {
	k.mu.Lock()
	at, held := k.held[id]
	lost := k.lost[id]
	k.mu.Unlock()
	switch {
	case lost:
		return false
	case !held || time.Since(at) < k.t.cfg.minIdle/2:
		return true
	}
	if !k.own(ctx, []string{id}) {
		return true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.lost[id]
}

// fresh reports whether id's idle time was reset less than half the min
// idle time ago: no other consumer can have adopted it.
func (k *keeper) fresh(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, held := k.held[id]
	return held && !k.lost[id] && time.Since(at) < k.t.cfg.minIdle/2
}
