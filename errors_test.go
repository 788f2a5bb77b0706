package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gormoutbox/outbox"
)

// Each failure says "permanent:" (or "unavailable:") once, however often it
// was marked on the way up, and stays comparable with errors.Is.
func TestMarkersAppearOnce(t *testing.T) {
	cause := errors.New("template missing")
	for name, c := range map[string]struct {
		err    error
		marker string
		is     func(error) bool
	}{
		"marked twice":            {outbox.Permanent(outbox.Permanent(cause)), "permanent:", outbox.IsPermanent},
		"wrapped, marked again":   {outbox.Permanent(fmt.Errorf("handler mail: %w", outbox.Permanent(cause))), "permanent:", outbox.IsPermanent},
		"joined, marked again":    {outbox.Permanent(errors.Join(fmt.Errorf("handler a: %w", outbox.Permanent(cause)))), "permanent:", outbox.IsPermanent},
		"unavailable, twice":      {outbox.Unavailable(fmt.Errorf("broker: %w", outbox.Unavailable(cause))), "unavailable:", outbox.IsUnavailable},
		"permanent, marked first": {outbox.Permanent(cause), "permanent:", outbox.IsPermanent},
	} {
		if n := strings.Count(c.err.Error(), c.marker); n != 1 {
			t.Errorf("%s: %q says %q %d times, want once", name, c.err, c.marker, n)
		}
		if !c.is(c.err) || !errors.Is(c.err, cause) {
			t.Errorf("%s: %v lost its mark or its cause", name, c.err)
		}
	}
	if outbox.Permanent(nil) != nil || outbox.Unavailable(nil) != nil {
		t.Error("marking nil is not nil")
	}
}
