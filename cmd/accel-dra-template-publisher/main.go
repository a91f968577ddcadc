// Command accel-dra-template-publisher mirrors the ResourceSlices of each Cluster API node
// group's nodes into a template on its MachineDeployment (or MachineSet), so that the Cluster
// Autoscaler can scale the group up from zero for pods with ResourceClaims. See
// docs/template-publisher.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	_ "k8s.io/component-base/logs/json/register"

	"github.com/accel-dra/accel-dra/pkg/cleanup/annotations"
	"github.com/accel-dra/accel-dra/pkg/publisher"
)

func main() {
	// The uninstall's clean-up of the publisher's annotations (docs/uninstall.md).
	if len(os.Args) > 1 && os.Args[1] == "cleanup" {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer cancel()
		scheme, err := publisher.NewScheme()
		if err == nil {
			err = annotations.Main(ctx, os.Args[2:], scheme, publisher.FieldManager)
		}
		if err != nil {
			klog.Background().Error(err, "Clean-up failed")
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
		klog.Flush()
		return
	}
	o := publisher.NewOptions()
	fs := o.NewFlagSet()
	if err := fs.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := o.ApplyLogging(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := publisher.Run(ctx, o); err != nil {
		klog.FromContext(ctx).Error(err, "accel-dra-template-publisher failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}
