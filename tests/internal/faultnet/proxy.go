// Package faultnet is a TCP proxy that makes the network between a client
// and a server bad on demand: latency, connections reset at random, cuts
// (every connection reset and new ones refused), partitions (bytes stop
// flowing but connections stay open, as when packets are dropped for a
// while) and blackholes (connections open during one are dead for good:
// their bytes, FIN and RST are dropped, never delivered, as when a NAT
// entry, a firewall's state or a failed-over address forgets them).
package faultnet

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards connections from its own port to a target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu          sync.Mutex
	conns       map[*link]struct{}
	cut         bool
	partitioned bool
	blackholed  bool
	healed      chan struct{} // closed when a partition ends
	latency     time.Duration
	jitter      time.Duration
	resetRate   float64 // resets per connection per second

	resets, cuts, partitions, accepted, dead atomic.Int64
	stop                                     chan struct{}
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	// dead: caught in a blackhole. Its bytes are read and dropped, and
	// neither side ever learns that the other closed.
	dead atomic.Bool
}

// New listens on a free port of 127.0.0.1 and forwards to target until t
// ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*link]struct{}{}, stop: make(chan struct{}), healed: make(chan struct{})}
	close(p.healed)
	go p.serve()
	go p.resetLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the port clients dial.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops the proxy and resets every connection.
func (p *Proxy) Close() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	_ = p.ln.Close()
	p.mu.Lock()
	for l := range p.conns {
		l.reset()
	}
	if p.partitioned {
		close(p.healed)
		p.partitioned = false
	}
	p.mu.Unlock()
}

// SetLatency delays every chunk of bytes, each way, by base plus a random
// part of jitter.
func (p *Proxy) SetLatency(base, jitter time.Duration) {
	p.mu.Lock()
	p.latency, p.jitter = base, jitter
	p.mu.Unlock()
}

// SetResetRate resets each open connection with this probability per
// second (0 turns resets off).
func (p *Proxy) SetResetRate(perSecond float64) {
	p.mu.Lock()
	p.resetRate = perSecond
	p.mu.Unlock()
}

// Cut resets every open connection and refuses (resets) new ones until
// Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.cuts.Add(1)
	for l := range p.conns {
		l.reset()
		p.resets.Add(1)
	}
}

// Partition stops bytes from flowing either way on every connection, open
// or new, until Restore: clients see no error, only silence, as when the
// network drops packets. Bytes sent meanwhile are delivered after Restore
// (TCP retransmits them).
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.partitioned {
		p.partitioned = true
		p.healed = make(chan struct{})
		p.partitions.Add(1)
	}
}

// Blackhole kills every open connection, and every new one until Restore,
// silently: their bytes are dropped from now on, even after Restore, and
// the proxy closes neither side when the other closes (neither FIN nor RST
// crosses), as when packets are dropped for good. The clients see
// silence; the server sees idle sessions (a transaction left open stays
// open, holding its locks, until the server itself ends the session).
// Connections made after Restore work.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackholed = true
	for l := range p.conns {
		if !l.dead.Swap(true) {
			p.dead.Add(1)
		}
	}
}

// Restore ends a Cut, a Partition or a Blackhole (whose connections stay
// dead).
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.blackholed = false
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
}

// Stats counts the faults injected so far.
type Stats struct {
	Accepted, Resets, Cuts, Partitions int64
	// Dead connections: caught in a blackhole.
	Dead int64
}

// Stats returns the faults injected so far.
func (p *Proxy) Stats() Stats {
	return Stats{Accepted: p.accepted.Load(), Resets: p.resets.Load(), Cuts: p.cuts.Load(), Partitions: p.partitions.Load(),
		Dead: p.dead.Load()}
}

func (l *link) reset() {
	for _, c := range []net.Conn{l.client, l.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		_ = c.Close()
	}
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		p.accepted.Add(1)
		go p.handle(c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		(&link{client: c, server: c}).reset()
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		(&link{client: c, server: c}).reset()
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.conns[l] = struct{}{}
	if p.blackholed {
		l.dead.Store(true)
		p.dead.Add(1)
	}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(l, s, c); done <- struct{}{} }()
	go func() { p.pipe(l, c, s); done <- struct{}{} }()
	<-done
	if l.dead.Load() {
		// Neither side hears of the other's end: wait for the proxy's.
		<-p.stop
	}
	l.reset()
	<-done
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, delaying each chunk by the
// latency and holding it during a partition, and dropping everything once
// l is dead.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if l.dead.Load() {
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if !p.hold() {
				return
			}
			if l.dead.Load() {
				continue // died while held
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// hold waits out the latency and any partition; it reports false when the
// proxy closed.
func (p *Proxy) hold() bool {
	p.mu.Lock()
	d := p.latency
	if p.jitter > 0 {
		d += rand.N(p.jitter)
	}
	healed := p.healed
	p.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-p.stop:
			return false
		}
	}
	select {
	case <-healed:
	case <-p.stop:
		return false
	}
	return true
}

// resetLoop resets connections at random at the configured rate.
func (p *Proxy) resetLoop() {
	const tick = 100 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		prob := p.resetRate * tick.Seconds()
		if prob > 0 {
			for l := range p.conns {
				if rand.Float64() < prob {
					l.reset()
					p.resets.Add(1)
				}
			}
		}
		p.mu.Unlock()
	}
}
