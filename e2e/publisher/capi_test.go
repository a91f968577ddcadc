//go:build e2e

// Package publisher holds the template publisher's end-to-end test and benchmark: a real
// control plane with Cluster API's CRDs (from the cluster-api module's config/crd/bases),
// MachineDeployments, MachineSets and Machines created as Cluster API would, nodes with real
// kubelets and the real node plugin (or, for the benchmark, Node objects and ResourceSlices
// created directly), and the real accel-dra-template-publisher and accelctl binaries.
//
//	KUBE_BIN_DIR=... go test -tags e2e -v -timeout 30m ./e2e/publisher/
//	KUBE_BIN_DIR=... go test -tags e2e -run '^$' -bench Publisher ./e2e/publisher/
package publisher

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/accel-dra/accel-dra/e2e/cluster"
	"github.com/accel-dra/accel-dra/e2e/framework"
)

// publisherProcess adds the test's metric readings to a running publisher.
type publisherProcess struct{ *framework.Publisher }

func startPublisher(ctx context.Context, c *cluster.Cluster, extra ...string) (*publisherProcess, error) {
	p, err := framework.StartPublisher(ctx, c, extra...)
	if err != nil {
		return nil, err
	}
	return &publisherProcess{p}, nil
}

// metric sums the samples of a metric whose labels contain all of the given "k=\"v\"" pairs.
func (p *publisherProcess) metric(name string, labels ...string) (float64, error) {
	return framework.ScrapeMetric(p.MetricsAddr, name, labels...)
}

// writes is the publisher's count of successful annotation writes.
func (p *publisherProcess) writes(t testing.TB) float64 {
	t.Helper()
	v, err := p.metric("accel_dra_template_publisher_writes_total", `result="success"`)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// reconciles is controller-runtime's count of the publisher's finished reconciles.
func (p *publisherProcess) reconciles(t testing.TB) float64 {
	t.Helper()
	v, err := p.metric("controller_runtime_reconcile_total", `controller="accel-dra-template-publisher"`)
	if err != nil {
		return 0
	}
	return v
}

// settle waits until the publisher has not reconciled anything for quiet, so that whatever it
// would do about the current state is done.
func (p *publisherProcess) settle(ctx context.Context, t testing.TB, quiet time.Duration) {
	t.Helper()
	p.settleAfter(ctx, t, quiet, -1)
}

// settleAfter is settle that also waits until the reconcile count exceeds before (a count read
// before a change the publisher must look at).
func (p *publisherProcess) settleAfter(ctx context.Context, t testing.TB, quiet time.Duration, before float64) {
	t.Helper()
	last, lastChange := p.reconciles(t), time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		now := p.reconciles(t)
		if now != last {
			last, lastChange = now, time.Now()
		}
		return last > before && time.Since(lastChange) >= quiet, nil
	})
	if err != nil {
		t.Fatalf("publisher did not settle (reconciles %v → %v): %v", before, last, err)
	}
}

// runAccelctl runs the accelctl binary with the admin kubeconfig.
func runAccelctl(ctx context.Context, c *cluster.Cluster, args ...string) (string, error) {
	bin, err := framework.Binary("accelctl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + c.KubeconfigPath()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("accelctl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// getMD reads a MachineDeployment.
func getMD(ctx context.Context, c client.Client, name string) (*clusterv1.MachineDeployment, error) {
	md := &clusterv1.MachineDeployment{}
	return md, c.Get(ctx, types.NamespacedName{Namespace: framework.CAPINamespace, Name: name}, md)
}

// waitForMD waits until a MachineDeployment satisfies cond.
func waitForMD(ctx context.Context, c client.Client, name string, timeout time.Duration, cond func(*clusterv1.MachineDeployment) bool) (*clusterv1.MachineDeployment, error) {
	var md *clusterv1.MachineDeployment
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := getMD(ctx, c, name)
		if err != nil {
			return false, nil
		}
		md = got
		return cond(got), nil
	})
	return md, err
}
