// Command accel-dra-mock-nvidia is the NVIDIA driver's tools on a mock GPU node: one static
// binary that the GPU mock's driver root holds under each tool's name, and that runs as the tool
// its name says (docs/sharing.md, docs/install.md). The tools live in
// pkg/backend/nvmlmock/tools.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/inert"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/mpscontrol"
	"github.com/accel-dra/accel-dra/pkg/backend/nvmlmock/tools/smi"
)

func main() {
	args := os.Args[1:]
	switch name := filepath.Base(os.Args[0]); name {
	case "nvidia-smi":
		os.Exit(smi.Main(args))
	case "nvidia-cuda-mps-control":
		os.Exit(mpscontrol.Main(args))
	case "nvidia-cuda-mps-server":
		os.Exit(mpscontrol.ServerMain(args))
	case "nvidia-debugdump", "nvidia-persistenced":
		os.Exit(inert.Main(name, args, os.Stdout, os.Stderr))
	default:
		fmt.Fprintf(os.Stderr, "%s: the NVIDIA driver's tools of the accel-dra GPU mock; run it as (a copy or link named) nvidia-smi, nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-debugdump or nvidia-persistenced\n", name)
		os.Exit(2)
	}
}
