package outboxredis

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
)

// FieldAfter, in an entry appended by a StreamPublisher WithKeyChain,
// holds the id of the entry appended before it to the same stream for the
// same partition key (absent for the first). Consumers WithKeyOrder wait
// for that entry.
const FieldAfter = "after"

// KeyChainTTL is how long a publisher WithKeyChain remembers the last
// entry of a partition key in a stream after appending it. An entry
// appended later than that has no predecessor: if the previous one is
// still pending then (consumers stopped for longer), the two may be
// handled in either order.
const KeyChainTTL = 7 * 24 * time.Hour

// ChainKey returns the key in which a publisher WithKeyChain keeps the id
// of the last entry appended to stream for partitionKey. It is in the
// stream's Redis Cluster slot.
func ChainKey(stream, partitionKey string) string {
	return slotKey(stream, ":outboxredis:chain:"+partitionKey)
}

// chainScript appends an entry naming the key's previous entry, and
// records it as the key's last, atomically (the relay appends one event of
// a key at a time; the script also keeps the order of one pipeline).
// KEYS[1] is the stream, KEYS[2] the key's chain; ARGV[1] is the chain's
// TTL in milliseconds, ARGV[2] the MAXLEN (0: none), ARGV[3…] the entry's
// fields and values. It returns the new entry's id.
var chainScript = redis.NewScript(`
local prev = redis.call('GET', KEYS[2])
local cmd = {'XADD', KEYS[1]}
if ARGV[2] ~= '0' then
  cmd[#cmd+1] = 'MAXLEN'; cmd[#cmd+1] = '~'; cmd[#cmd+1] = ARGV[2]
end
cmd[#cmd+1] = '*'
for i = 3, #ARGV do cmd[#cmd+1] = ARGV[i] end
if prev then cmd[#cmd+1] = 'after'; cmd[#cmd+1] = prev end
local id = redis.call(unpack(cmd))
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return id
`)

// chained reports whether e is appended through the key chain.
func (p *StreamPublisher) chained(e *outbox.Envelope) bool {
	return p.cfg.keyChain && e != nil && e.PartitionKey != ""
}

// appendChained queues (or runs) the chained append of args for e on s:
// one EVAL, whose reply is the entry id.
func (p *StreamPublisher) appendChained(ctx context.Context, s redis.Scripter, e *outbox.Envelope, a *redis.XAddArgs) *redis.Cmd {
	argv := make([]any, 0, 2+len(a.Values.([]any)))
	argv = append(argv, strconv.FormatInt(KeyChainTTL.Milliseconds(), 10), strconv.FormatInt(a.MaxLen, 10))
	argv = append(argv, a.Values.([]any)...)
	return chainScript.Eval(ctx, s, []string{a.Stream, ChainKey(a.Stream, e.PartitionKey)}, argv...)
}
