// Command accelctl shows and seeds accel-dra node group templates and simulates whether a new
// node of a Cluster API node group could satisfy ResourceClaims. See docs/accelctl.md.
//
// Named kubectl-accel (as the release archives ship it), it is the kubectl plugin
// `kubectl accel`, and its help says so.
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
	name := accelctl.CommandName(os.Args[0])
	cmd := accelctl.NewCommandAs(name, accelctl.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, nil)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		// simulate's exit code says whether the claims fit (see accelctl simulate --help).
		cancel()
		os.Exit(accelctl.ExitCode(err))
	}
}
