package nodeplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/accel-dra/accel-dra/pkg/backend"
	"github.com/accel-dra/accel-dra/pkg/cdicanary"
	"github.com/accel-dra/accel-dra/pkg/cdicanary/canarytest"
)

// TestRuntimeExposure lays out host roots as the GPU operator's toolkit, `nvidia-ctk runtime
// configure` and k3s leave them, and checks when the plugin warns that unprivileged containers
// get every GPU through NVIDIA's runtime.
func TestRuntimeExposure(t *testing.T) {
	const (
		// containerd 2.x (config version 3), the toolkit's drop-in, as the GPU operator writes it.
		v3Imports   = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
		v3DropIn    = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = \"nvidia\"\n"
		v2Default   = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"nvidia\"\n"
		v2Runc      = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n"
		acceptFalse = "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
		acceptTrue  = "accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
	)
	tests := map[string]struct {
		files       map[string]string
		wantChecked bool
		// want are substrings of the warning; none: no warning.
		want    []string
		wantErr string
	}{
		"nothing to read": {},
		"runc default":    {files: map[string]string{"etc/containerd/config.toml": v2Runc}, wantChecked: true},
		"nvidia default, toolkit default": {
			files:       map[string]string{"etc/containerd/config.toml": v2Default},
			wantChecked: true, want: []string{`"nvidia"`, "/etc/containerd/config.toml", "the toolkit's default", "NVIDIA_VISIBLE_DEVICES=all", "accept-nvidia-visible-devices-envvar-when-unprivileged = false"},
		},
		"nvidia default, toolkit accepts": {
			files:       map[string]string{"etc/containerd/config.toml": v2Default, "etc/nvidia-container-runtime/config.toml": acceptTrue},
			wantChecked: true, want: []string{"/etc/nvidia-container-runtime/config.toml"},
		},
		"nvidia default, toolkit refuses": {
			files:       map[string]string{"etc/containerd/config.toml": v2Default, "etc/nvidia-container-runtime/config.toml": acceptFalse},
			wantChecked: true,
		},
		"operator drop-in and the operator's toolkit configuration": {
			files: map[string]string{
				"etc/containerd/config.toml":                                            v3Imports,
				"etc/containerd/conf.d/99-nvidia.toml":                                  v3DropIn,
				"usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml": acceptTrue,
			},
			wantChecked: true, want: []string{"/etc/containerd/conf.d/99-nvidia.toml", "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"},
		},
		"a later import puts runc back": {
			files: map[string]string{
				"etc/containerd/config.toml":           "version = 3\nimports = [\"/etc/containerd/conf.d/10-nvidia.toml\", \"/etc/containerd/conf.d/20-runc.toml\"]\n",
				"etc/containerd/conf.d/10-nvidia.toml": v3DropIn,
				"etc/containerd/conf.d/20-runc.toml":   "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = \"runc\"\n",
			},
			wantChecked: true,
		},
		"k3s": {
			files:       map[string]string{"var/lib/rancher/k3s/agent/etc/containerd/config.toml": v2Default},
			wantChecked: true, want: []string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml"},
		},
		"unreadable containerd configuration": {
			files:       map[string]string{"etc/containerd/config.toml": "version = [\n"},
			wantChecked: true, wantErr: "/etc/containerd/config.toml",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			why, checked, err := runtimeExposure(root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if checked != tc.wantChecked {
				t.Errorf("checked = %v, want %v", checked, tc.wantChecked)
			}
			if (why != "") != (len(tc.want) > 0) {
				t.Fatalf("warning %q, want one: %v", why, len(tc.want) > 0)
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("warning %q does not say %q", why, w)
				}
			}
			var got recordedWarnings
			_, ctx := ktesting.NewTestContext(t)
			checkRuntimeExposure(ctx, root, &got)
			if (len(got) == 1) != (why != "") || len(got) > 1 {
				t.Errorf("events %q, want one for the warning %q", got, why)
			}
		})
	}
}

// TestHostRoot: the runtime's configuration is read only where the plugin sees the host's /.
func TestHostRoot(t *testing.T) {
	for _, tc := range []struct {
		backend, root, hostRoot, want string
	}{
		{backend: backend.NVML, root: "/driver-root", hostRoot: "/", want: "/driver-root"},
		{backend: backend.NVML, root: "/", want: "/"},
		{backend: backend.NVML, root: "/driver-root-parent/driver", hostRoot: "/run/nvidia/driver"},
		{backend: backend.NVML},
		{backend: backend.Mock, root: "/driver-root", hostRoot: "/"},
	} {
		o := NewOptions()
		o.Backend, o.NVIDIADriverRoot, o.NVIDIAHostDriverRoot = tc.backend, tc.root, tc.hostRoot
		if got := o.hostRoot(); got != tc.want {
			t.Errorf("backend %s, driver root %q (host %q): host root %q, want %q", tc.backend, tc.root, tc.hostRoot, got, tc.want)
		}
	}
}

// TestRuntimeIgnoresCDI: containerd 1.7 without enable_cdi starts containers without their CDI
// devices and says nothing; the plugin says it at start, where it can read the configuration,
// and logs what to check where it cannot.
func TestRuntimeIgnoresCDI(t *testing.T) {
	const (
		v2CDI   = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n"
		v2NoCDI = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n"
		v2Off   = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = false\n"
	)
	tests := map[string]struct {
		runtime      string
		files        map[string]string
		noRoot       bool
		want         []string // substrings of the warning; none: no warning
		wantVerified bool
	}{
		"containerd 2.x":                   {runtime: "containerd://2.1.4", files: map[string]string{"etc/containerd/config.toml": v2NoCDI}, wantVerified: true},
		"cri-o":                            {runtime: "cri-o://1.34.0", wantVerified: true},
		"containerd 1.7, unparsed version": {runtime: "containerd://v1.7.35", files: map[string]string{"etc/containerd/config.toml": v2NoCDI}, wantVerified: true, want: []string{"containerd v1.7.35"}},
		"containerd 1.7 with CDI":          {runtime: "containerd://1.7.28", files: map[string]string{"etc/containerd/config.toml": v2CDI}, wantVerified: true},
		"containerd 1.7 without":           {runtime: "containerd://1.7.28", files: map[string]string{"etc/containerd/config.toml": v2NoCDI}, wantVerified: true, want: []string{"containerd 1.7.28", "/etc/containerd/config.toml", "enable_cdi = true"}},
		"containerd 1.7 turned off":        {runtime: "containerd://1.7.28", files: map[string]string{"etc/containerd/config.toml": v2CDI, "etc/containerd/conf.d/x.toml": v2Off}, wantVerified: true},
		"containerd 1.7, k3s":              {runtime: "containerd://1.7.27-k3s1", files: map[string]string{"var/lib/rancher/k3s/agent/etc/containerd/config.toml": v2NoCDI}, wantVerified: true, want: []string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml"}},
		"containerd 1.7, not visible":      {runtime: "containerd://1.7.28", noRoot: true, want: []string{"cannot see", "containerd config dump"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if name == "containerd 1.7 turned off" {
				// The drop-in is imported after the top-level file and turns CDI off again.
				tc.files["etc/containerd/config.toml"] = "imports = [\"/etc/containerd/conf.d/*.toml\"]\n" + tc.files["etc/containerd/config.toml"]
				tc.want, tc.wantVerified = []string{"/etc/containerd/conf.d/x.toml"}, true
			}
			writeTree(t, root, tc.files)
			if tc.noRoot {
				root = ""
			}
			why, verified, err := runtimeIgnoresCDI(root, tc.runtime)
			if err != nil {
				t.Fatal(err)
			}
			if (why != "") != (len(tc.want) > 0) || verified != tc.wantVerified {
				t.Fatalf("warning %q, verified %v; want a warning: %v, verified %v", why, verified, len(tc.want) > 0, tc.wantVerified)
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("warning %q does not say %q", why, w)
				}
			}
			var got recordedWarnings
			_, ctx := ktesting.NewTestContext(t)
			checkRuntimeCDI(ctx, root, tc.runtime, &got)
			if wantEvent := why != "" && verified; (len(got) == 1) != wantEvent || len(got) > 1 {
				t.Errorf("events %q, want one: %v", got, wantEvent)
			}
		})
	}
}

// writeTree writes files, by path under root, as a host's configuration.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRuntimeCanary: where the CDI canary shows the runtime ignoring CDI, the plugin warns on
// the Node and, in refuse mode, withholds its devices; where the runtime applies CDI it says
// nothing; where the canary cannot tell, the version's inference stands in.
func TestRuntimeCanary(t *testing.T) {
	tests := map[string]struct {
		endpoint     string
		runtime      func(cdiDir string) *canarytest.Runtime
		mode         string
		wantAnswered bool
		wantWithhold bool
		wantEvent    bool
	}{
		"no endpoint":                   {mode: RuntimeCDIRefuse},
		"CDI applied":                   {endpoint: "/run/containerd/containerd.sock", runtime: func(d string) *canarytest.Runtime { return canarytest.New(true, d) }, mode: RuntimeCDIRefuse, wantAnswered: true},
		"CDI ignored, refuse":           {endpoint: "/run/containerd/containerd.sock", runtime: func(d string) *canarytest.Runtime { return canarytest.New(false, d) }, mode: RuntimeCDIRefuse, wantAnswered: true, wantWithhold: true, wantEvent: true},
		"CDI ignored, warn":             {endpoint: "/run/containerd/containerd.sock", runtime: func(d string) *canarytest.Runtime { return canarytest.New(false, d) }, mode: RuntimeCDIWarn, wantAnswered: true, wantEvent: true},
		"canary cannot tell: no answer": {endpoint: "/run/containerd/containerd.sock", runtime: func(string) *canarytest.Runtime { return canarytest.New(true, "/nonexistent") }, mode: RuntimeCDIRefuse},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			o := NewOptions()
			o.CDIRoot, o.RuntimeEndpoint, o.RuntimeCanaryImage, o.RuntimeCDICheck = t.TempDir(), tc.endpoint, "plugin:test", tc.mode
			var rt *canarytest.Runtime
			if tc.runtime != nil {
				rt = tc.runtime(o.CDIRoot)
			}
			old := canaryRuntime
			t.Cleanup(func() { canaryRuntime = old })
			canaryRuntime = func(string) (cdicanary.Runtime, func() error, error) { return rt, func() error { return nil }, nil }
			var events recordedWarnings
			answered, withhold := checkRuntimeCanary(ctx, o, &events)
			if answered != tc.wantAnswered || withhold != tc.wantWithhold {
				t.Errorf("answered %v, withhold %v; want %v, %v", answered, withhold, tc.wantAnswered, tc.wantWithhold)
			}
			if (len(events) == 1) != tc.wantEvent || len(events) > 1 {
				t.Fatalf("events %q, want one: %v", events, tc.wantEvent)
			}
			if tc.wantEvent && (!strings.Contains(events[0], ReasonRuntimeIgnoresCDI) || !strings.Contains(events[0], "--runtime-cdi-check="+tc.mode) || !strings.Contains(events[0], "enable_cdi = true")) {
				t.Errorf("event %q does not name the reason, the mode and the fix", events[0])
			}
			if rt != nil && (len(rt.Sandboxes) != 0 || len(rt.Containers) != 0) {
				t.Errorf("the canary left sandboxes %v, containers %v", rt.Sandboxes, rt.Containers)
			}
		})
	}
}

func TestRuntimeCDICheckFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--runtime-cdi-check=refuse"}},
		{args: []string{"--runtime-cdi-check=warn", "--runtime-endpoint=/run/containerd/containerd.sock", "--runtime-canary-image=plugin:1"}},
		{args: []string{"--runtime-cdi-check=off"}, wantErr: `--runtime-cdi-check="off"`},
		{args: []string{"--runtime-endpoint=/run/containerd/containerd.sock"}, wantErr: "--runtime-canary-image"},
	} {
		o := NewOptions()
		o.NodeName = "n"
		if err := o.NewFlagSet().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Complete()
		if (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: Complete: %v, want an error with %q", tc.args, err, tc.wantErr)
		}
	}
}
