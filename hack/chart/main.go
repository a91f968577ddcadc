// Command chart packages accel-dra's Helm chart and pushes it to an OCI registry with Helm's own
// code (the helm.sh/helm/v4 module the chart's tests render with), so that `make chart` and
// `make chart-push` need no helm binary:
//
//	go run ./hack/chart package DIR             # DIR/accel-dra-<version>.tgz
//	go run ./hack/chart push [--plain-http] TGZ oci://REGISTRY/PATH
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/accel-dra/accel-dra/deployments/helm"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: chart package DIR | chart push [--plain-http] TGZ oci://REGISTRY/PATH")
	}
	switch args[0] {
	case "package":
		if len(args) != 2 {
			return fmt.Errorf("usage: chart package DIR")
		}
		path, err := helm.Package(args[1])
		if err != nil {
			return err
		}
		fmt.Println(path)
		return nil
	case "push":
		fs := flag.NewFlagSet("push", flag.ContinueOnError)
		plain := fs.Bool("plain-http", false, "Talk to the registry over HTTP (a local registry).")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return fmt.Errorf("usage: chart push [--plain-http] TGZ oci://REGISTRY/PATH")
		}
		ref, err := helm.Push(fs.Arg(0), fs.Arg(1), *plain, os.Stderr)
		if err != nil {
			return err
		}
		fmt.Println(ref)
		return nil
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}
