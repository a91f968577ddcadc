package accelctl

import "errors"

// Exit codes of accelctl. simulate's say which way its chosen verdict went, so a CI job can
// gate on it; every other failure (bad flags or input, no cluster, no group) is ExitError.
const (
	ExitFits      = 0
	ExitError     = 1
	ExitNotFit    = 2
	ExitUndecided = 3
)

// exitError is an error that ends accelctl with a code other than ExitError.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// ExitCode is the process exit code the error asks for.
func (e *exitError) ExitCode() int { return e.code }

// ExitCode returns the exit code for an error returned by the command: 0 for nil, the code an
// error carries, else ExitError.
func ExitCode(err error) int {
	if err == nil {
		return ExitFits
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return ExitError
}
