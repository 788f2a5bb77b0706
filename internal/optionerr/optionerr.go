// Package optionerr is how options of this module record configuration
// errors: an option that gets a bad value calls Fail, and the constructor
// (or Validate) reports every error, joined. The relay, the idempotency
// store and the adapters share it.
package optionerr

import (
	"errors"
	"fmt"
)

// Errors collects the configuration errors of options: an option that
// gets a bad value calls Fail, and the constructor (or Validate) reports
// Err, every error joined. Embed it in a configuration, with Sentinel set
// to the package's ErrInvalidOption.
type Errors struct {
	// Sentinel is wrapped by every error Fail records.
	Sentinel error
	errs     []error
}

// Fail records an error, "<sentinel>: <format>", that wraps Sentinel and
// any error among args formatted with %w.
func (o *Errors) Fail(format string, args ...any) {
	if o.Sentinel == nil {
		o.errs = append(o.errs, fmt.Errorf(format, args...))
		return
	}
	o.errs = append(o.errs, fmt.Errorf("%w: "+format, append([]any{o.Sentinel}, args...)...))
}

// Add records err, an error already wrapping the sentinel, unless it is
// nil.
func (o *Errors) Add(err error) {
	if err != nil {
		o.errs = append(o.errs, err)
	}
}

// Err returns the errors recorded, joined, or nil.
func (o *Errors) Err() error { return errors.Join(o.errs...) }

// Apply applies opts, functions of the configuration c, in order; a nil
// option is recorded as a failure in errs.
func Apply[C any, O ~func(*C)](c *C, errs *Errors, opts []O) {
	for _, o := range opts {
		if o == nil {
			errs.Fail("nil option")
			continue
		}
		o(c)
	}
}
