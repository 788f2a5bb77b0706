package outboxredis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/internal/adapterkit/redisdown"
)

func TestVersionAtLeast(t *testing.T) {
	cases := map[string]bool{"8.6.0": true, "8.6": true, "8.10.1": true, "9.0.0": true, "8.5.9": false, "7.0.15": false, "": false, "x.y": false}
	for v, want := range cases {
		if got := versionAtLeast(v, 8, 6); got != want {
			t.Errorf("versionAtLeast(%q) = %v", v, got)
		}
	}
	if got := infoField("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis_version"); got != "7.0.15" {
		t.Errorf("infoField = %q", got)
	}
}

func TestSlotKeySharesTheStreamsSlot(t *testing.T) {
	cases := map[string]string{
		"orders":        "{orders}:x",
		"{shop}:orders": "{shop}:orders:x",
		"a{}b":          "a{}b:x", // no valid tag: another slot
		"a}b":           "a}b:x",
	}
	for stream, want := range cases {
		if got := slotKey(stream, ":x"); got != want {
			t.Errorf("slotKey(%q) = %q, want %q", stream, got, want)
		}
	}
}

// redisReply is an error reply of the server, as go-redis returns it.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// redisdown reads errors as text (so that the core module needs no
// go-redis): go-redis's own errors, and the replies its Is…Error
// functions recognise, are outages by their text.
func TestGoRedisErrorsAreOutages(t *testing.T) {
	down := []error{redis.ErrClosed, redis.ErrPoolTimeout, redis.ErrPoolExhausted, fmt.Errorf("XADD: %w", redis.ErrClosed)}
	for _, reply := range []string{"LOADING Redis is loading the dataset in memory", "READONLY You can't write against a read only replica.",
		"MASTERDOWN Link with MASTER is down", "CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request during rehashing of slot",
		"ERR max number of clients reached", "OOM command not allowed when used memory > 'maxmemory'."} {
		down = append(down, redisReply(reply))
	}
	for _, err := range down {
		is := redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) || redis.IsClusterDownError(err) ||
			redis.IsTryAgainError(err) || redis.IsMaxClientsError(err) || redis.IsOOMError(err) ||
			errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
		if !is || !redisdown.Outage(context.Background(), err) {
			t.Errorf("%v: go-redis says down %v, redisdown.Outage %v", err, is, redisdown.Outage(context.Background(), err))
		}
	}
	if redisdown.Outage(context.Background(), redisReply("WRONGTYPE Operation against a key holding the wrong kind of value")) {
		t.Error("WRONGTYPE classified as an outage")
	}
}

func TestCompareIDs(t *testing.T) {
	ordered := []string{"1-0", "1-9", "1-10", "2-0", "10-0", "1700000000000-3"}
	for i := range ordered {
		for j := range ordered {
			if got, want := compareIDs(ordered[i], ordered[j]), cmp.Compare(i, j); got != want {
				t.Errorf("compareIDs(%s, %s) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}
