package adapterkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

func TestOutageRule(t *testing.T) {
	broker := errors.New("broker: not now")
	isBroker := func(err error) bool { return errors.Is(err, broker) }
	down := []error{
		context.DeadlineExceeded,
		fmt.Errorf("x: %w", context.Canceled),
		io.EOF,
		fmt.Errorf("x: %w", io.ErrUnexpectedEOF),
		net.ErrClosed,
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		fmt.Errorf("x: %w", syscall.ECONNRESET),
		fmt.Errorf("x: %w", broker),
	}
	for _, err := range down {
		if !Outage(context.Background(), err, isBroker) {
			t.Errorf("%v: not an outage", err)
		}
	}
	for _, err := range []error{nil, errors.New("message too large"), fmt.Errorf("x: %w", outbox.ErrInvalidEnvelope)} {
		if Outage(context.Background(), err, isBroker) {
			t.Errorf("%v: an outage", err)
		}
	}
	if Outage(context.Background(), broker, nil) {
		t.Error("a broker error without the broker's check is an outage")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !Outage(ctx, errors.New("anything"), nil) {
		t.Error("an error after the context ended is the event's fault")
	}
}

func TestCheckHandlerName(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("é", idempotency.MaxHandlerNameLen+1)} {
		if err := CheckHandlerName(name); !errors.Is(err, ErrHandlerName) {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"billing", strings.Repeat("é", idempotency.MaxHandlerNameLen)} {
		if err := CheckHandlerName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 7: 5 * time.Second, 50: 5 * time.Second} {
		if got := RetryStep(n); got < want/2 || got > want {
			t.Errorf("RetryStep(%d) = %v, want within [%v, %v]", n, got, want/2, want)
		}
	}
	if got := NextPause(0, time.Second, 30*time.Second); got != time.Second {
		t.Errorf("first pause %v", got)
	}
	if got := NextPause(20*time.Second, time.Second, 30*time.Second); got != 30*time.Second {
		t.Errorf("capped pause %v", got)
	}
}

func TestCallRecoversAPanic(t *testing.T) {
	sentinel := errors.New("x: handler panicked")
	log := slog.New(slog.DiscardHandler)
	err := Call(log, sentinel, &outbox.Envelope{ID: "e"}, func() error { panic("boom") })
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Call: %v", err)
	}
	want := errors.New("plain")
	if err := Call(log, sentinel, &outbox.Envelope{ID: "e"}, func() error { return want }); err != want {
		t.Errorf("Call: %v", err)
	}
}

func TestPublisherConfig(t *testing.T) {
	sentinel := errors.New("x: invalid option")
	c := NewPublisherConfig(sentinel)
	if c.Source != outbox.DefaultSource || c.Logger != slog.Default() || c.Err() != nil {
		t.Fatalf("defaults: %q, %v, %v", c.Source, c.Logger, c.Err())
	}
	l := slog.New(slog.DiscardHandler)
	c.SetSource("shop")
	c.SetLogger(l)
	if c.Source != "shop" || c.Logger != l || c.Err() != nil {
		t.Errorf("set: %q, %v, %v", c.Source, c.Logger, c.Err())
	}
	c.SetSource("")
	c.SetLogger(nil)
	err := c.Err()
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "x: invalid option: empty source") ||
		!strings.Contains(err.Error(), "x: invalid option: nil logger") {
		t.Errorf("bad values: %v", err)
	}
}
