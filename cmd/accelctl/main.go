// Command accelctl shows and seeds accel-dra node group templates and simulates whether a new
// node of a Cluster API node group could satisfy ResourceClaims. See docs/template-publisher.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/accel-dra/accel-dra/pkg/accelctl"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	cmd := accelctl.NewCommand(accelctl.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, nil)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "accelctl:", err)
		// simulate's exit code says whether the claims fit (see accelctl simulate --help).
		os.Exit(accelctl.ExitCode(err))
	}
}
