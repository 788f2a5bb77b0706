package optionerr

import (
	"errors"
	"strings"
	"testing"
)

func TestErrorsJoinEveryFailure(t *testing.T) {
	sentinel := errors.New("pkg: invalid option")
	e := Errors{Sentinel: sentinel}
	if e.Err() != nil {
		t.Fatal("no failure, yet an error")
	}
	e.Fail("batch %d is too large", 5)
	e.Add(nil)
	e.Add(errors.New("other"))
	err := e.Err()
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "pkg: invalid option: batch 5 is too large") ||
		!strings.Contains(err.Error(), "other") {
		t.Errorf("Err() = %v", err)
	}
}
