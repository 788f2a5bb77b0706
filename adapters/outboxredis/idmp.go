package outboxredis

import (
	"context"
	"strconv"
	"strings"
	"sync"
)

// idmpProbe remembers whether the server supports XADD … IDMP.
type idmpProbe struct {
	mu        sync.Mutex
	checked   bool
	supported bool
}

// useIDMP reports whether appends should carry IDMP: the option is set and
// the server is Redis 8.6 or later. The version is asked once; a failed
// question is asked again on the next call, and meanwhile IDMP is left out.
func (p *StreamPublisher) useIDMP(ctx context.Context) bool {
	if p.cfg.producerID == "" || p.rdb == nil {
		return false
	}
	p.idmp.mu.Lock()
	defer p.idmp.mu.Unlock()
	if p.idmp.checked {
		return p.idmp.supported
	}
	info, err := p.rdb.Info(ctx, "server").Result()
	if err != nil {
		p.log.Warn("outboxredis: cannot read the Redis version; appending without IDMP", "error", err)
		return false
	}
	version := infoField(info, "redis_version")
	p.idmp.checked = true
	p.idmp.supported = versionAtLeast(version, 8, 6)
	if !p.idmp.supported {
		p.log.Info("outboxredis: Redis has no XADD IDMP (needs 8.6); consumers dedupe by event id", "redis_version", version)
	}
	return p.idmp.supported
}

// infoField returns the value of field in the reply of INFO.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// versionAtLeast reports whether the dotted version v is at least
// major.minor; an unparsable version is not.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && mnr >= minor)
}
