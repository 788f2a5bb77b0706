package outboxprom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is Metrics served at /metrics on an address of its own, from
// Listen until Shutdown.
type Server struct {
	*Metrics
	ln     net.Listener
	srv    *http.Server
	served chan error

	once sync.Once
	err  error // of the first Shutdown
}

// Listen listens on addr (host:port; port 0 picks a free one) and serves
// the metrics of New(opts...) at /metrics in a goroutine of its own, until
// Shutdown. It returns once the address is bound, so that a port in use is
// its error, not a later one.
func Listen(addr string, opts ...Option) (*Server, error) {
	m, err := New(opts...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = m.Shutdown(context.Background())
		return nil, fmt.Errorf("outboxprom: listening on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("outbox metrics at /metrics\n"))
	})
	s := &Server{
		Metrics: m,
		ln:      ln,
		srv:     &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		served:  make(chan error, 1),
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on, with the port Listen picked
// for port 0: the metrics are at http://<Addr>/metrics.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the server (a scrape in progress finishes, until ctx
// ends) and then the meter provider. It returns the server's error if it
// had stopped serving on its own before. Later calls return the first
// one's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		err := s.srv.Shutdown(ctx)
		if served := <-s.served; !errors.Is(served, http.ErrServerClosed) {
			err = errors.Join(err, fmt.Errorf("outboxprom: serving: %w", served))
		}
		s.err = errors.Join(err, s.Metrics.Shutdown(ctx))
	})
	return s.err
}
