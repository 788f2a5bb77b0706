package adapterkit

import (
	"context"
	"time"
)

// Collect is a transport's receiving step over a channel of deliveries:
// it waits for a first value until ctx ends or wait passes (no wait when
// wait is 0 or less: until ctx ends), then takes the values already
// buffered, without waiting, up to n in all. closed reports that c was
// closed (the values before the close are returned).
func Collect[T any](ctx context.Context, c <-chan T, n int, wait time.Duration) (vs []T, closed bool) {
	var expired <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	select {
	case v, ok := <-c:
		if !ok {
			return nil, true
		}
		vs = append(vs, v)
	case <-expired:
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
	for len(vs) < n {
		select {
		case v, ok := <-c:
			if !ok {
				return vs, true
			}
			vs = append(vs, v)
		default:
			return vs, false
		}
	}
	return vs, false
}
