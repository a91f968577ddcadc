package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const testVersion = "v0.0.0-test"

// buildAccelctl builds the real accelctl for this machine into bin/<os>_<arch>/accelctl, stamped
// with testVersion as hack/build.sh stamps a release, and a stand-in for a platform this machine
// does not run (verify only checks its archive).
func buildAccelctl(t *testing.T) (bin, foreign string) {
	t.Helper()
	bin = t.TempDir()
	host := filepath.Join(bin, runtime.GOOS+"_"+runtime.GOARCH)
	// As hack/build.sh builds it (static, -trimpath), so that after `make build` (CI builds
	// first) only the link is new.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/accel-dra/accel-dra/pkg/buildinfo.Version="+testVersion,
		"-o", filepath.Join(host, exe("accelctl", runtime.GOOS)), "github.com/accel-dra/accel-dra/cmd/accelctl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build accelctl: %v\n%s", err, out)
	}
	foreign = "windows/amd64"
	if runtime.GOOS == "windows" {
		foreign = "linux/arm64"
	}
	goos, arch, _ := strings.Cut(foreign, "/")
	if err := os.MkdirAll(filepath.Join(bin, goos+"_"+arch), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, goos+"_"+arch, exe("accelctl", goos)), []byte("a binary for "+foreign), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, foreign
}

// TestPackVerify: the manifest names an archive per platform with its sha256, the archive holds
// kubectl-accel (kubectl-accel.exe on Windows), and the one for this machine runs as `kubectl-accel
// version` with the manifest's version. The archives are the same bytes when packed again.
func TestPackVerify(t *testing.T) {
	bin, foreign := buildAccelctl(t)
	host := runtime.GOOS + "/" + runtime.GOARCH
	out := filepath.Join(t.TempDir(), "release")
	opts := PackOptions{Bin: bin, Version: testVersion, URL: "https://example.com/releases/" + testVersion + "/", Out: out, Platforms: []string{host, foreign}}
	manifest, err := Pack(opts)
	if err != nil {
		t.Fatal(err)
	}
	if manifest != filepath.Join(out, "accel.yaml") {
		t.Errorf("manifest %s, want accel.yaml (krew: the plugin's name)", manifest)
	}
	p, err := Verify(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "accel" || p.Spec.Version != testVersion {
		t.Errorf("manifest %s %s %s %s", p.APIVersion, p.Kind, p.Metadata.Name, p.Spec.Version)
	}
	for i, platform := range []string{host, foreign} {
		pl := p.Spec.Platforms[i]
		goos, arch, _ := strings.Cut(platform, "/")
		name := "kubectl-accel_" + testVersion + "_" + goos + "_" + arch + ".tar.gz"
		if pl.URI != "https://example.com/releases/"+testVersion+"/"+name {
			t.Errorf("%s: uri %s", platform, pl.URI)
		}
		if pl.Selector.MatchLabels["os"] != goos || pl.Selector.MatchLabels["arch"] != arch {
			t.Errorf("%s: selector %v", platform, pl.Selector.MatchLabels)
		}
		if want := exe("kubectl-accel", goos); pl.Bin != want {
			t.Errorf("%s: bin %s, want %s", platform, pl.Bin, want)
		}
	}

	// Packed again (the small stand-in only: compressing accelctl under the race detector
	// takes a while), the archive is the same bytes.
	again := filepath.Join(t.TempDir(), "again")
	opts.Out, opts.Platforms = again, []string{foreign}
	if _, err := Pack(opts); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(p.Spec.Platforms[1].URI)
	a, _ := os.ReadFile(filepath.Join(out, name))
	b, _ := os.ReadFile(filepath.Join(again, name))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("%s: packed twice, %d and %d bytes that differ", name, len(a), len(b))
	}

	// Each way a manifest and its archives can disagree is found, with what disagrees. (Only
	// the version case unpacks this machine's archive, the slow part under the race detector.)
	hostArchive := filepath.Base(p.Spec.Platforms[0].URI)
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
		want   string
	}{
		{"archive changed after packing", func(t *testing.T, dir string) {
			appendTo(t, filepath.Join(dir, hostArchive), "x")
		}, "has sha256"},
		{"archive missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, hostArchive)); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
		{"bin not in the archive", func(t *testing.T, dir string) {
			editManifest(t, dir, func(p *Plugin) { p.Spec.Platforms[1].Bin = "accelctl" })
		}, "no accelctl in the archive"},
		{"version the binary does not report", func(t *testing.T, dir string) {
			editManifest(t, dir, func(p *Plugin) { p.Spec.Version = "v9.9.9" })
		}, `kubectl-accel version reports "` + testVersion + `", the manifest "v9.9.9"`},
		{"version without v", func(t *testing.T, dir string) {
			editManifest(t, dir, func(p *Plugin) { p.Spec.Version = "0.0.0" })
		}, "is not v<semver>"},
		{"no platform for this machine", func(t *testing.T, dir string) {
			editManifest(t, dir, func(p *Plugin) { p.Spec.Platforms = p.Spec.Platforms[1:] })
		}, "no platform for this machine"},
		{"selector without arch", func(t *testing.T, dir string) {
			editManifest(t, dir, func(p *Plugin) { delete(p.Spec.Platforms[1].Selector.MatchLabels, "arch") })
		}, "is not one os and one arch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, out)
			tc.change(t, dir)
			if _, err := Verify(filepath.Join(dir, "accel.yaml")); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("verify: %v, want an error with %q", err, tc.want)
			}
		})
	}
	t.Run("manifest not named after the plugin", func(t *testing.T) {
		dir := copyDir(t, out)
		if err := os.Rename(filepath.Join(dir, "accel.yaml"), filepath.Join(dir, "kubectl-accel.yaml")); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(filepath.Join(dir, "kubectl-accel.yaml")); err == nil || !strings.Contains(err.Error(), `krew wants the manifest of plugin "accel" in accel.yaml`) {
			t.Errorf("verify: %v", err)
		}
	})
}

// TestPackRefuses: bad input is refused before anything is written, so that no manifest names
// archives that are not there.
func TestPackRefuses(t *testing.T) {
	bin := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bin, "linux_amd64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "linux_amd64", "accelctl"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := PackOptions{Bin: bin, Version: "v0.1.0", URL: "https://example.com", Platforms: []string{"linux/amd64"}}
	for _, tc := range []struct {
		name   string
		change func(*PackOptions)
		want   string
	}{
		{"version without v", func(o *PackOptions) { o.Version = "0.1.0" }, `-version "0.1.0": krew wants a semantic version with a leading v`},
		{"version not semver", func(o *PackOptions) { o.Version = "v0.1" }, "krew wants a semantic version"},
		{"platform without arch", func(o *PackOptions) { o.Platforms = []string{"linux"} }, `platform "linux": not one krew installs on`},
		{"platform krew does not install on", func(o *PackOptions) { o.Platforms = []string{"plan9/amd64"} }, `platform "plan9/amd64"`},
		{"platform twice", func(o *PackOptions) { o.Platforms = []string{"linux/amd64", "linux/amd64"} }, "given twice"},
		{"binary not built", func(o *PackOptions) { o.Platforms = []string{"linux/amd64", "darwin/arm64"} }, "platform darwin/arm64: stat " + filepath.Join(bin, "darwin_arm64", "accelctl")},
		{"no platforms", func(o *PackOptions) { o.Platforms = nil }, "no platforms"},
		{"no url", func(o *PackOptions) { o.URL = "" }, "-bin, -url and -out are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			o.Out = filepath.Join(t.TempDir(), "release")
			tc.change(&o)
			if _, err := Pack(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("pack: %v, want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(o.Out); !os.IsNotExist(err) {
				t.Errorf("a refused pack wrote %s (%v)", o.Out, err)
			}
		})
	}
}

func appendTo(t *testing.T, name, s string) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func editManifest(t *testing.T, dir string, edit func(*Plugin)) {
	t.Helper()
	name := filepath.Join(dir, "accel.yaml")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var p Plugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatal(err)
	}
	edit(&p)
	if b, err = yaml.Marshal(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return to
}
