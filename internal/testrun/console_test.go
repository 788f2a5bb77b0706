package main

import (
	"bytes"
	"fmt"
	"testing"
)

// Three modules tested at once: the first one's lines print as they
// come, the others' in the modules' order once those before them are
// done, whatever order they finish in.
func TestConsoleKeepsTheModulesOrder(t *testing.T) {
	var out bytes.Buffer
	c := newConsole(&out, 3)
	fmt.Fprintln(c.slot(2), "c1")
	fmt.Fprintln(c.slot(0), "a1")
	fmt.Fprintln(c.slot(1), "b1")
	if got := out.String(); got != "a1\n" {
		t.Fatalf("while the first module runs: %q, want only its line", got)
	}
	c.finish(2)
	fmt.Fprintln(c.slot(1), "b2")
	c.finish(0)
	if got := out.String(); got != "a1\nb1\nb2\n" {
		t.Fatalf("after the first module: %q, want the second's lines too", got)
	}
	fmt.Fprintln(c.slot(1), "b3")
	c.finish(1)
	if got, want := out.String(), "a1\nb1\nb2\nb3\nc1\n"; got != want {
		t.Errorf("in the end: %q, want %q", got, want)
	}
}
