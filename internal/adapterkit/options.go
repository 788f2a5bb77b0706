package adapterkit

import (
	"errors"
	"fmt"
)

// OptionErrors collects the configuration errors of options: an option
// that gets a bad value calls Fail, and the constructor (or Validate)
// reports Err, every error joined. Embed it in a configuration, with
// Sentinel set to the package's ErrInvalidOption.
type OptionErrors struct {
	// Sentinel is wrapped by every error Fail records.
	Sentinel error
	errs     []error
}

// Fail records an error, "<sentinel>: <format>", that wraps Sentinel and
// any error among args formatted with %w.
func (o *OptionErrors) Fail(format string, args ...any) {
	if o.Sentinel == nil {
		o.errs = append(o.errs, fmt.Errorf(format, args...))
		return
	}
	o.errs = append(o.errs, fmt.Errorf("%w: "+format, append([]any{o.Sentinel}, args...)...))
}

// Err returns the errors recorded, joined, or nil.
func (o *OptionErrors) Err() error { return errors.Join(o.errs...) }
