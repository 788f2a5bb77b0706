package faultnet

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Tap forwards connections from its own port to a target address, and
// tells some of them apart by what their clients send: a connection whose
// client has sent the marker (such as a Redis replica's REPLCONF) is
// marked. On demand (Drop) the bytes the server sends to marked
// connections are dropped silently, while every other connection works: a
// Redis master behind a Tap goes on acknowledging its clients' writes
// while its replicas stop hearing of them, as in a partition between the
// master and its replicas.
type Tap struct {
	target string
	marker []byte
	ln     net.Listener

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	dropped atomic.Int64 // bytes dropped
	drop    atomic.Bool
	marked  atomic.Int64 // connections marked
}

// NewTap listens on a free port of 127.0.0.1 and forwards to target until
// t ends, marking the connections whose clients send marker.
func NewTap(t testing.TB, target, marker string) *Tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Tap{target: target, marker: []byte(marker), ln: ln, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Port is the port clients dial.
func (p *Tap) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Drop starts dropping what the server sends to marked connections.
func (p *Tap) Drop() { p.drop.Store(true) }

// Restore stops dropping (what was dropped stays lost).
func (p *Tap) Restore() { p.drop.Store(false) }

// Dropped returns how many bytes were dropped, and how many connections
// were marked.
func (p *Tap) Dropped() (bytes, marked int64) { return p.dropped.Load(), p.marked.Load() }

// Close stops the tap and closes every connection.
func (p *Tap) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *Tap) serve() {
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		go p.handle(c)
	}
}

func (p *Tap) handle(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var marked atomic.Bool
	done := make(chan struct{}, 2)
	go func() { // client → server: look for the marker
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32*1024)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if !marked.Load() && bytes.Contains(buf[:n], p.marker) {
					marked.Store(true)
					p.marked.Add(1)
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // server → client: dropped for marked clients on demand
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32*1024)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				if marked.Load() && p.drop.Load() {
					p.dropped.Add(int64(n))
				} else if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
	_ = c.Close()
	_ = s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}
