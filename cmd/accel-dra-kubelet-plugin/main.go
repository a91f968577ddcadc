// Command accel-dra-kubelet-plugin is the node half of accel-dra: a DRA kubelet plugin for GPUs
// and NPUs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	_ "k8s.io/component-base/logs/json/register"

	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

func main() {
	// The plugin binary is also each MPS control daemon's runner (its pods run it, docs/sharing.md).
	sharing.RunDaemonCommand(os.Args)
	// `generate-template`: the template of a declared node shape (docs/template-publisher.md).
	if len(os.Args) > 1 && os.Args[1] == nodeplugin.GenerateCommand {
		if err := nodeplugin.RunGenerate(context.Background(), os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return
	}
	o := nodeplugin.NewOptions()
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
	if err := nodeplugin.Run(ctx, o); err != nil {
		klog.FromContext(ctx).Error(err, "accel-dra-kubelet-plugin failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}
