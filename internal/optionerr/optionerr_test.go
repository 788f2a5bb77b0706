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

func TestApplyRecordsNilOptions(t *testing.T) {
	type config struct {
		n int
		Errors
	}
	c := config{Errors: Errors{Sentinel: errors.New("pkg: invalid option")}}
	Apply(&c, &c.Errors, []func(*config){func(c *config) { c.n++ }, nil, func(c *config) { c.n += 10 }})
	if c.n != 11 || c.Err() == nil || !strings.Contains(c.Err().Error(), "nil option") {
		t.Errorf("n %d, err %v; want 11 and the nil option reported", c.n, c.Err())
	}
}
