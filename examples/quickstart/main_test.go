package main

import "testing"

// The README's first command must keep working.
func TestQuickstart(t *testing.T) {
	if err := run(15, false); err != nil {
		t.Fatal(err)
	}
}
