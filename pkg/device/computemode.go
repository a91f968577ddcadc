package device

import "context"

// ComputeMode is a GPU's compute mode, as nvidia-smi names it.
type ComputeMode string

const (
	// ComputeModeDefault lets any number of processes use the GPU; the driver's default.
	ComputeModeDefault ComputeMode = "DEFAULT"
	// ComputeModeExclusiveProcess lets one process (an MPS server) use the GPU, which MPS needs.
	ComputeModeExclusiveProcess ComputeMode = "EXCLUSIVE_PROCESS"
)

// ComputeModeSetter sets the compute mode of a whole GPU by UUID (GPU sharing,
// docs/sharing.md); the NVML backend implements it.
type ComputeModeSetter interface {
	SetComputeMode(ctx context.Context, uuid string, mode ComputeMode) error
}
