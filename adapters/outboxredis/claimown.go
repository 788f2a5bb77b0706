package outboxredis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// claimOwnScript delivers entry ARGV[3] of group ARGV[1] again to
// consumer ARGV[2] (XCLAIM, which counts a delivery) only if that
// consumer still owns it, and returns {1, id, fields, excused} (excused
// from the hash KEYS[2], "0" if none); {0} if another consumer owns the
// entry, {-1} if it is no longer pending or was deleted. KEYS[1] is the
// stream.
var claimOwnScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return {-1} end
if p[1][2] ~= ARGV[2] then return {0} end
local m = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3])
if #m == 0 or not m[1] then return {-1} end
return {1, m[1][1], m[1][2], redis.call('HGET', KEYS[2], ARGV[3]) or '0'}
`)

// claimOne delivers id to this consumer again (XCLAIM, which counts a
// delivery) if it is still this consumer's, and reads its excused
// deliveries. ok is false when the entry is no longer pending, was
// deleted, or another consumer adopted it meanwhile: XCLAIM alone takes
// an entry from whichever consumer holds it, and would take it from one
// that adopted it and is running it.
func (c *Consumer) claimOne(ctx context.Context, id string) (m redis.XMessage, excused int64, ok bool, err error) {
	res, err := claimOwnScript.Run(ctx, c.rdb, []string{c.stream, c.excusedKey}, c.group, c.name, id).Slice()
	if err != nil {
		return m, 0, false, fmt.Errorf("outboxredis: XCLAIM %s %s: %w", c.stream, id, err)
	}
	if n, _ := res[0].(int64); n != 1 || len(res) != 4 {
		if n == 0 {
			c.log.Info("outboxredis: another consumer adopted a message this consumer was to retry; left to it", "entry_id", id)
		}
		return m, 0, false, nil
	}
	m.ID, _ = res[1].(string)
	fields, _ := res[2].([]any)
	m.Values = make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		if k, ok := fields[i].(string); ok {
			m.Values[k] = fields[i+1]
		}
	}
	s, _ := res[3].(string)
	excused, _ = strconv.ParseInt(s, 10, 64) // none recorded: "0"
	return m, excused, true, nil
}
