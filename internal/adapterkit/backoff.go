package adapterkit

import (
	"context"
	"math/rand/v2"
	"time"
)

// RetryStep is a consumer's wait after n consecutive failures of its
// broker's commands: 100ms doubling to 5s, with jitter (half of it
// random).
func RetryStep(n int) time.Duration {
	d := 5 * time.Second
	if n < 7 {
		d = 100 * time.Millisecond << max(n-1, 0)
	}
	return d/2 + rand.N(d/2+1)
}

// NextPause is a consumer's pause after a handler reported its transport
// unavailable, given the previous pause (0 after a success): twice the
// previous one, at least floor and at most ceiling.
func NextPause(prev, floor, ceiling time.Duration) time.Duration {
	return min(max(2*prev, floor), ceiling)
}

// Sleep waits for d or the end of ctx.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Every calls fn every interval from a goroutine of its own (a keeper
// that holds a consumer's messages), until stop is called; stop returns
// once fn is not running.
func Every(interval time.Duration, fn func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
