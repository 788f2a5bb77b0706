package adapterkit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestCollect(t *testing.T) {
	c := make(chan int, 10)
	for i := range 5 {
		c <- i
	}
	if vs, closed := Collect(context.Background(), c, 3, time.Second); fmt.Sprint(vs) != "[0 1 2]" || closed {
		t.Errorf("up to 3 of 5 buffered: %v, closed %v", vs, closed)
	}
	if vs, closed := Collect(context.Background(), c, 10, time.Second); fmt.Sprint(vs) != "[3 4]" || closed {
		t.Errorf("the 2 left, without waiting for more: %v, closed %v", vs, closed)
	}
	began := time.Now()
	if vs, closed := Collect(context.Background(), c, 10, 50*time.Millisecond); len(vs) != 0 || closed || time.Since(began) < 50*time.Millisecond {
		t.Errorf("nothing within the wait: %v, closed %v, after %v", vs, closed, time.Since(began))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if vs, closed := Collect(ctx, c, 10, 0); len(vs) != 0 || closed {
		t.Errorf("ctx ended: %v, closed %v", vs, closed)
	}
	go func() { time.Sleep(20 * time.Millisecond); c <- 7; c <- 8; close(c) }()
	if vs, closed := Collect(context.Background(), c, 10, 0); len(vs) == 0 || vs[0] != 7 {
		t.Errorf("waited for the first: %v, closed %v", vs, closed)
	}
	time.Sleep(20 * time.Millisecond)
	if vs, closed := Collect(context.Background(), c, 10, 0); !closed {
		t.Errorf("after the close: %v, closed %v", vs, closed)
	}
}

func TestEvery(t *testing.T) {
	var mu sync.Mutex
	n := 0
	stop := Every(10*time.Millisecond, func() { mu.Lock(); n++; mu.Unlock() })
	time.Sleep(100 * time.Millisecond)
	stop()
	mu.Lock()
	got := n
	mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if got == 0 || n != got {
		t.Errorf("%d calls before stop, %d after", got, n)
	}
}
