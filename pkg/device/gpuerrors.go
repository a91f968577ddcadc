package device

import (
	"errors"
	"fmt"
	"strings"
)

// ErrGPULost marks the error of a GPU that has fallen off the bus (NVML's GPU_IS_LOST): it
// answers nothing until it is reset or the node reboots, so nothing set on it can be put back
// before then, and nothing made on it outlives that.
var ErrGPULost = errors.New("GPU is lost")

// GPUError is the failure of one GPU in a call about all of them.
type GPUError struct {
	// Index is the GPU's NVML index; UUID is empty when the GPU could not tell it. Err names
	// the index already.
	Index int
	UUID  string
	Err   error
}

func (e GPUError) Error() string {
	if e.UUID != "" {
		return fmt.Sprintf("gpu %s: %v", e.UUID, e.Err)
	}
	return e.Err.Error()
}

func (e GPUError) Unwrap() error { return e.Err }

// GPUErrors are the GPUs a call about all of them could not read; the call's result covers the
// others. One GPU's failure must not stop the work on the others: a node with one broken GPU
// still serves the rest.
type GPUErrors []GPUError

func (e GPUErrors) Error() string {
	msgs := make([]string, 0, len(e))
	for _, g := range e {
		msgs = append(msgs, g.Error())
	}
	return strings.Join(msgs, "; ")
}

func (e GPUErrors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, g := range e {
		out = append(out, g)
	}
	return out
}
