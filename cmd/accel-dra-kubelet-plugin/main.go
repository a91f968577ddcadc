// Command accel-dra-kubelet-plugin is the node half of accel-dra: a DRA kubelet plugin for GPUs
// and NPUs.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	_ "k8s.io/component-base/logs/json/register"

	"github.com/accel-dra/accel-dra/pkg/cleanup"
	"github.com/accel-dra/accel-dra/pkg/nodeplugin"
	"github.com/accel-dra/accel-dra/pkg/sharing"
)

func main() {
	// The plugin binary is also each MPS control daemon's runner (its pods run it, docs/sharing.md).
	sharing.RunDaemonCommand(os.Args)
	// And the uninstall clean-up's (docs/uninstall.md).
	if len(os.Args) > 1 && os.Args[1] == cleanup.Command {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err := cleanup.Run(ctx, os.Args[2:], os.Stderr)
		cancel()
		if err != nil {
			klog.Background().Error(err, "Clean-up failed")
			// The pod's termination message, which the clean-up's wait reports per node; the
			// kubelet mounts the file into containers (never created here, outside a pod).
			if f, ferr := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0); ferr == nil {
				_, _ = f.WriteString(err.Error())
				_ = f.Close()
			}
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
		klog.Flush()
		os.Exit(0)
	}
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
		if errors.Is(err, nodeplugin.ErrExecAgain) {
			klog.FromContext(ctx).Info("Starting again in a new process", "reason", err.Error())
			klog.Flush()
			cancel()
			err = fmt.Errorf("starting again in a new process: %w", nodeplugin.ExecAgain())
		}
		klog.FromContext(ctx).Error(err, "accel-dra-kubelet-plugin failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}
