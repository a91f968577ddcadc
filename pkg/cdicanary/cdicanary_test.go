package cdicanary

import (
	"errors"
	"os"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/cdicanary/canarytest"
)

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		rt      func(cdiDir string) *canarytest.Runtime
		want    bool
		wantErr string
	}{
		"containerd 2.x: CDI applied": {
			rt:   func(d string) *canarytest.Runtime { return canarytest.New(true, "/etc/cdi-none", d) },
			want: true,
		},
		"containerd 1.7 without enable_cdi: the device is dropped silently": {
			rt: func(d string) *canarytest.Runtime { return canarytest.New(false, d) },
		},
		"CDI on, but the runtime reads other directories: refused visibly": {
			rt:      func(string) *canarytest.Runtime { return canarytest.New(true, "/nonexistent-cdi") },
			wantErr: "unresolvable CDI devices",
		},
		"no spec in the verbose status": {
			rt: func(d string) *canarytest.Runtime {
				r := canarytest.New(true, d)
				r.NoInfo = true
				return r
			},
			wantErr: ErrNoSpec.Error(),
		},
		"sandbox refused": {
			rt: func(string) *canarytest.Runtime {
				r := canarytest.New(true)
				r.SandboxErr = errors.New("no pause image")
				return r
			},
			wantErr: "running its pod sandbox: no pause image",
		},
		"container refused": {
			rt: func(string) *canarytest.Runtime {
				r := canarytest.New(true)
				r.CreateErr = errors.New("image not found")
				return r
			},
			wantErr: "creating a container with CDI device accel-dra.io/canary=c",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			rt := tc.rt(dir)
			got, err := Check(ctx, rt, Options{CDIDir: dir, Image: "accel-dra-kubelet-plugin:test", Namespace: "accel-dra"})
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Check: %v, want an error with %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.wantErr == "" && got != tc.want:
				t.Errorf("Check says applied=%v, want %v", got, tc.want)
			}
			// Nothing outlives the check, whatever its result.
			if len(rt.Sandboxes) != 0 || len(rt.Containers) != 0 {
				t.Errorf("left in the runtime: sandboxes %v, containers %v", rt.Sandboxes, rt.Containers)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("left in the CDI directory: %v", left)
			}
		})
	}
}

func TestCheckNeedsDirAndImage(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rt := canarytest.New(true)
	if _, err := Check(ctx, rt, Options{CDIDir: t.TempDir()}); err == nil {
		t.Error("Check without an image: no error")
	}
	if rt.Calls != 0 {
		t.Error("Check without an image called the runtime")
	}
}
