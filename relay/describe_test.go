package relay_test

import (
	"context"
	"testing"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/relay"
)

// The adapters say where they deliver, for heartbeats and "outbox stats"
// (the brokers' modules test their publishers' descriptions).
func TestAdaptersDescribeThemselves(t *testing.T) {
	mux := inproc.NewMux(nil)
	for _, typ := range []string{"order.paid", "order.created"} {
		if err := mux.HandleFunc(typ, "mail", func(context.Context, *outbox.Envelope) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		pub  relay.Describer
		want string
	}{
		{inproc.NewMux(nil), "inproc, no handlers"},
		{mux, "inproc handlers of order.created, order.paid"},
	}
	for _, c := range cases {
		if got := c.pub.Describe(); got != c.want {
			t.Errorf("%T.Describe() = %q, want %q", c.pub, got, c.want)
		}
	}
}
