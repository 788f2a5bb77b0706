package outboxamqp_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// stallProxy forwards TCP connections to a server and can stop passing the
// server's bytes to the clients (a broker that hangs), without closing
// anything.
type stallProxy struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	halted bool
	conns  []net.Conn
}

func newStallProxy(t testing.TB, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &stallProxy{target: target, ln: ln}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() {
		p.resume()
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

// stall stops passing the server's bytes on; resume passes them again.
func (p *stallProxy) stall() { p.mu.Lock(); p.halted = true; p.mu.Unlock() }

func (p *stallProxy) resume() {
	p.mu.Lock()
	p.halted = false
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, gate{s, p}); _ = c.Close() }()
	}
}

// gate is a reader that blocks while the proxy is stalled.
type gate struct {
	r io.Reader
	p *stallProxy
}

func (g gate) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	g.p.mu.Lock()
	for g.p.halted {
		g.p.cond.Wait()
	}
	g.p.mu.Unlock()
	return n, err
}

// cut closes every connection.
func (p *stallProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
