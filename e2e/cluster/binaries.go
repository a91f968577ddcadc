package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

const modulePath = "github.com/accel-dra/accel-dra"

// requiredBinaries are the programs the harness runs from the bin dir.
var requiredBinaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet"}

// findBinDir returns the directory holding requiredBinaries: opts.BinDir, else $KUBE_BIN_DIR,
// else whatever hack/build-k8s.sh prints (it builds once, then answers from its cache).
func findBinDir(ctx context.Context, opts Options, buildLog string, logf func(string, ...any)) (string, error) {
	dir, source := opts.BinDir, "Options.BinDir"
	if dir == "" {
		dir, source = os.Getenv(EnvBinDir), "$"+EnvBinDir
	}
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", fmt.Errorf("finding the Kubernetes binaries: set %s or run from inside the %s module: %w", EnvBinDir, modulePath, err)
		}
		script := filepath.Join(root, "hack", "build-k8s.sh")
		logf("binaries from %s (cached after one cold build of 10+ minutes; its log: %s)", script, buildLog)
		start := time.Now()
		dir, err = runBuildScript(ctx, script, buildLog)
		if err != nil {
			return "", err
		}
		source = script
		if d := time.Since(start); d > 5*time.Second {
			logf("binaries built in %s", d.Round(time.Second))
		}
	}
	for _, b := range requiredBinaries {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("bin dir %s (from %s) has no executable %s", dir, source, b)
		}
	}
	return dir, nil
}

func runBuildScript(ctx context.Context, script, logPath string) (string, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout = &stdout
	cmd.Stderr = logFile
	cmd.Dir = filepath.Dir(filepath.Dir(script))
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s failed: %w\n--- last lines of %s:\n%s", script, err, logPath, logTail(logPath, 30))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", fmt.Errorf("%s printed no bin dir", script)
	}
	return dir, nil
}

// moduleRoot finds this module's root by walking up from the working directory (go test runs in
// the package directory), then from this source file (which -trimpath hides).
func moduleRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && bytes.Contains(data, []byte("module "+modulePath+"\n")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("no go.mod of " + modulePath + " above the working directory")
}
