package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
)

// DialFunc opens a new connection to the broker. A Publisher or Consumer
// given one (WithDial) calls it when its connection is closed, and closes
// the connections it dialled itself when it is closed. It must honour
// ctx's deadline, which is the relay's for a Publisher.
type DialFunc func(ctx context.Context) (*amqp.Connection, error)

// DefaultDialTimeout bounds a dial and the AMQP handshake made by a
// DialFunc of Dialer, unless the context ends sooner.
const DefaultDialTimeout = 30 * time.Second

// Dialer returns a DialFunc that dials url with cfg (amqp091.DialConfig),
// bounding the TCP connect and the AMQP handshake by the context's
// deadline and DefaultDialTimeout. cfg.Dial, when set, is used as is.
//
//	pub, err := outboxamqp.NewPublisher(nil, outboxamqp.WithDial(outboxamqp.Dialer(url, amqp091.Config{})))
func Dialer(url string, cfg amqp.Config) DialFunc {
	return func(ctx context.Context) (*amqp.Connection, error) {
		c := cfg
		if c.Dial == nil {
			deadline := time.Now().Add(DefaultDialTimeout)
			if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
				deadline = d
			}
			c.Dial = func(network, addr string) (net.Conn, error) {
				d := net.Dialer{Deadline: deadline}
				conn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				// The handshake's deadline; amqp091 clears it once open.
				if err := conn.SetDeadline(deadline); err != nil {
					_ = conn.Close()
					return nil, err
				}
				return conn, nil
			}
		}
		return amqp.DialConfig(url, c)
	}
}

// connSource holds the connection a Publisher or Consumer uses, and dials
// a new one when it is closed and a DialFunc was given.
type connSource struct {
	mu     sync.Mutex
	conn   *amqp.Connection
	owned  bool // dialled here: closed by close
	dial   DialFunc
	closed bool
	log    *slog.Logger
}

// get returns an open connection: the current one, or a new one from the
// DialFunc. Its errors are marked outbox.Unavailable (ErrClosed too: a
// relay still running on a closed Publisher spends no attempt).
func (s *connSource) get(ctx context.Context) (*amqp.Connection, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, outbox.Unavailable(ErrClosed)
	}
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	if s.dial == nil {
		return nil, outbox.Unavailable(fmt.Errorf("%w: the connection given is closed, and no DialFunc (WithDial) can open another", ErrConnectionClosed))
	}
	if s.owned && s.conn != nil {
		_ = s.conn.Close()
	}
	conn, err := s.dial(ctx)
	if err == nil && conn == nil {
		err = errors.New("the DialFunc returned no connection")
	}
	if err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("%w: dialling: %w", ErrConnectionClosed, err))
	}
	s.conn, s.owned = conn, true
	s.log.Info("outboxamqp: connected", "addr", remoteAddr(conn))
	return conn, nil
}

// close closes the connection if it was dialled here; the connection the
// application gave is left open.
func (s *connSource) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.owned && s.conn != nil && !s.conn.IsClosed() {
		return s.conn.Close()
	}
	return nil
}

// addr returns the broker address of the current connection, or "".
func (s *connSource) addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return remoteAddr(s.conn)
}

func remoteAddr(c *amqp.Connection) string {
	if c == nil {
		return ""
	}
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

func (s *connSource) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// release closes the connection if it was dialled here and forgets it, so
// that the next get dials again; the source stays usable.
func (s *connSource) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owned && s.conn != nil {
		_ = s.conn.Close()
		s.conn, s.owned = nil, false
	}
}
