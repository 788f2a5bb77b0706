package main

import (
	"bytes"
	"io"
	"sync"
)

// console prints what the modules tested at once say, in the modules'
// order: the first unfinished module's lines as they come, each other's
// kept until the modules before it are done.
type console struct {
	mu   sync.Mutex
	out  io.Writer
	bufs []bytes.Buffer
	done []bool
	head int // the module printing straight to out
}

func newConsole(out io.Writer, modules int) *console {
	return &console{out: out, bufs: make([]bytes.Buffer, modules), done: make([]bool, modules)}
}

// slot is the writer of module i.
func (c *console) slot(i int) io.Writer { return slotWriter{c, i} }

type slotWriter struct {
	c *console
	i int
}

func (w slotWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if w.i == w.c.head {
		return w.c.out.Write(p)
	}
	return w.c.bufs[w.i].Write(p)
}

// finish marks module i done, and prints what the modules after it kept
// until one that is still running, which then prints as it goes.
func (c *console) finish(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done[i] = true
	for c.head < len(c.done) && c.done[c.head] {
		c.head++
		if c.head < len(c.bufs) {
			_, _ = c.bufs[c.head].WriteTo(c.out)
		}
	}
}
