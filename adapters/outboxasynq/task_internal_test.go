package outboxasynq

import (
	"testing"

	"github.com/gormoutbox/outbox"
)

func TestTaskQueueFallsBackToDefault(t *testing.T) {
	for name, tc := range map[string]struct {
		opts  []Option
		topic string
		want  string
	}{
		"topic":             {nil, "orders", "orders"},
		"no topic":          {nil, "", DefaultQueue},
		"mapped":            {[]Option{WithQueue(func(*outbox.Envelope) string { return "mapped" })}, "orders", "mapped"},
		"mapped to nothing": {[]Option{WithQueue(func(*outbox.Envelope) string { return "" })}, "orders", DefaultQueue},
		"mapped to a blank": {[]Option{WithQueue(func(*outbox.Envelope) string { return "  " })}, "orders", DefaultQueue},
	} {
		p := NewPublisher(nil, tc.opts...)
		_, _, q, err := p.task(&outbox.Envelope{ID: "e", Type: "t", Topic: tc.topic})
		if err != nil || q != tc.want {
			t.Errorf("%s: queue %q, %v; want %q", name, q, err, tc.want)
		}
	}
}
