// Command runcwrap runs runc with the capabilities a container asks for cut down to those this
// process can still grant, for machines whose capability bounding set lacks some capability
// (CAP_SYS_RESOURCE on the CI machines): there runc fails every privileged container with
// "unable to apply caps: operation not permitted", because a privileged container asks for every
// capability the runtime knows. It is registered as a Docker runtime (hack/kind/docker.sh) and
// as containerd's runc binary in the offline kind node image (hack/kind/node/), and only where
// the bounding set is short: on a machine with the full set it is not installed at all.
//
//	runcwrap [--runc=PATH] <runc arguments>
//	runcwrap --missing    prints the capabilities missing from the bounding set, space-separated
//
// It rewrites the bundle's config.json for `create` and `run`, and the --process file for
// `exec`, then executes runc with the arguments unchanged. PATH defaults to $RUNCWRAP_RUNC or
// the first runc on $PATH that is not this program.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/accel-dra/accel-dra/hack/kind/runcwrap/capfilter"
)

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "--missing" {
		set, err := capfilter.Bounding()
		if err != nil {
			fail(err)
		}
		fmt.Println(strings.Join(set.Missing(), " "))
		return
	}
	runc := os.Getenv("RUNCWRAP_RUNC")
	if len(args) > 0 && len(args[0]) > len("--runc=") && args[0][:len("--runc=")] == "--runc=" {
		runc, args = args[0][len("--runc="):], args[1:]
	}
	if runc == "" {
		var err error
		if runc, err = capfilter.FindRunc(); err != nil {
			fail(err)
		}
	}
	if err := capfilter.Rewrite(args); err != nil {
		fail(err)
	}
	if err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ()); err != nil {
		fail(fmt.Errorf("exec %s: %w", runc, err))
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
	os.Exit(1)
}
