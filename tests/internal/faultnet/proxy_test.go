package faultnet

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("bad echo " + line)
	}
	return nil
}

func TestProxyFaults(t *testing.T) {
	p := New(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatalf("healthy: %v", err)
	}

	p.SetLatency(100*time.Millisecond, 0)
	start := time.Now()
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatalf("latency: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("round trip took %v with 100ms each way", d)
	}
	p.SetLatency(0, 0)

	p.Partition()
	if err := roundTrip(c, 300*time.Millisecond); err == nil {
		t.Fatal("round trip through a partition succeeded")
	}
	p.Restore()
	// The bytes held by the partition arrive after it heals.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c2, 5*time.Second); err != nil {
		t.Fatalf("after partition: %v", err)
	}

	p.Cut()
	if err := roundTrip(c2, 2*time.Second); err == nil {
		t.Fatal("round trip on a cut connection succeeded")
	}
	if c3, err := net.Dial("tcp", p.Addr()); err == nil {
		if err := roundTrip(c3, 2*time.Second); err == nil {
			t.Fatal("new connection during a cut worked")
		}
	}
	p.Restore()
	c4, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c4, 5*time.Second); err != nil {
		t.Fatalf("after cut: %v", err)
	}

	p.SetResetRate(100) // every connection within a tick
	deadline := time.Now().Add(5 * time.Second)
	for roundTrip(c4, time.Second) == nil {
		if time.Now().After(deadline) {
			t.Fatal("connection never reset")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := p.Stats(); s.Resets < 2 || s.Cuts != 1 || s.Partitions != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A blackhole kills the connections it catches for good, silently (no
// error, no close reaches the other side); connections made after Restore
// work.
func TestProxyBlackhole(t *testing.T) {
	closed := make(chan struct{}, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close(); closed <- struct{}{} }()
		}
	}()
	p := New(t, ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	p.Blackhole()
	if err := roundTrip(c, 300*time.Millisecond); err == nil {
		t.Fatal("round trip through a blackhole succeeded")
	}
	p.Restore()
	if err := roundTrip(c, 300*time.Millisecond); err == nil {
		t.Fatal("a connection caught in a blackhole came back")
	}
	_ = c.Close()
	select {
	case <-closed:
		t.Fatal("the server heard the client's close through the blackhole")
	case <-time.After(300 * time.Millisecond):
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c2, 5*time.Second); err != nil {
		t.Fatalf("new connection after the blackhole: %v", err)
	}
	if s := p.Stats(); s.Dead != 1 {
		t.Errorf("stats %+v, want 1 dead", s)
	}
}

// A Tap forwards every connection, and after Drop silences the server's
// bytes to the connections whose clients sent the marker, only.
func TestTapDropsMarkedConnections(t *testing.T) {
	p := NewTap(t, echoServer(t), "REPLCONF")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	plain, marked := dial(), dial()
	if err := roundTrip(plain, 5*time.Second); err != nil {
		t.Fatalf("plain: %v", err)
	}
	_ = marked.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := marked.Write([]byte("REPLCONF\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(marked).ReadString('\n'); err != nil || line != "REPLCONF\n" {
		t.Fatalf("marked before Drop: %q, %v", line, err)
	}
	p.Drop()
	if err := roundTrip(plain, 5*time.Second); err != nil {
		t.Fatalf("plain after Drop: %v", err)
	}
	if err := roundTrip(marked, 300*time.Millisecond); err == nil {
		t.Fatal("a marked connection got the server's answer after Drop")
	}
	if b, m := p.Dropped(); b == 0 || m != 1 {
		t.Errorf("Dropped: %d bytes, %d marked; want some bytes, 1 marked", b, m)
	}
}
