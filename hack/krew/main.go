// Command krew packs accelctl's release archives, in which it is the kubectl plugin
// kubectl-accel, and writes their krew plugin manifest (`make release`):
//
//	go run ./hack/krew pack -bin BIN -version vX.Y.Z -url URL -out DIR OS/ARCH...
//	go run ./hack/krew verify DIR/accel.yaml
//
// pack puts BIN/<os>_<arch>/accelctl (accelctl.exe on Windows), as hack/build.sh builds it, into
// DIR/kubectl-accel_<version>_<os>_<arch>.tar.gz as kubectl-accel (kubectl-accel.exe), and writes
// DIR/accel.yaml, a krew Plugin (apiVersion krew.googlecontainertools.github.com/v1alpha2) with one
// platform per archive: a selector on os and arch, the uri URL/<archive>, the archive's sha256,
// and bin. The archives are reproducible: the same binaries give the same bytes and sha256.
//
// verify checks a manifest against the archives beside it: each platform's archive exists, has
// the manifest's sha256 and holds its bin; the archive of this machine's platform is unpacked and
// its bin run as `kubectl-accel version`, which must report the manifest's version.
//
// The manifest format is krew's (https://krew.sigs.k8s.io/docs/developer-guide/plugin-manifest/);
// `kubectl krew install --manifest=DIR/accel.yaml --archive=DIR/<archive>` installs from the
// files before they are uploaded (https://krew.sigs.k8s.io/docs/developer-guide/testing-locally/).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	// pluginName is the plugin's krew name: `kubectl krew install accel`, `kubectl accel`. krew
	// requires the manifest's file to be named after it.
	pluginName = "accel"
	// executable is the name kubectl runs for `kubectl accel` (pkg/accelctl.PluginExecutable).
	executable = "kubectl-accel"
	apiVersion = "krew.googlecontainertools.github.com/v1alpha2"
)

// Plugin is krew's plugin manifest, with the fields accelctl's uses (krew's index.Plugin, whose
// module is not among accel-dra's dependencies).
type Plugin struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   Metadata   `json:"metadata"`
	Spec       PluginSpec `json:"spec"`
}

type Metadata struct {
	Name string `json:"name"`
}

type PluginSpec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Caveats          string     `json:"caveats,omitempty"`
	Platforms        []Platform `json:"platforms"`
}

type Platform struct {
	Selector Selector `json:"selector"`
	URI      string   `json:"uri"`
	Sha256   string   `json:"sha256"`
	Bin      string   `json:"bin"`
}

type Selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

const homepage = "https://github.com/accel-dra/accel-dra/blob/main/docs/accelctl.md"

const description = `Shows, lists and seeds accel-dra's node group templates (the ResourceSlices a new
node of a Cluster API MachineDeployment, MachineSet or MachinePool would publish), and
simulates whether a new node of a group would satisfy a set of ResourceClaims, with
kube-scheduler's DRA allocator. The same binary is accelctl under its own name.`

const caveats = `"kubectl accel template generate" runs accel-dra's node plugin binary
(accel-dra-kubelet-plugin), which this plugin does not include; give its path
with --plugin. Every other command needs only kubectl's configuration.`

// The platforms krew installs on: its os and arch labels are Go's GOOS and GOARCH.
var supported = map[string]bool{
	"linux/amd64": true, "linux/arm64": true, "linux/arm": true, "linux/ppc64le": true, "linux/s390x": true,
	"darwin/amd64": true, "darwin/arm64": true, "windows/amd64": true, "windows/arm64": true,
}

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

const usage = "usage: krew pack -bin BIN -version vX.Y.Z -url URL -out DIR OS/ARCH... | krew verify MANIFEST"

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "pack":
		fs := flag.NewFlagSet("pack", flag.ContinueOnError)
		var o PackOptions
		fs.StringVar(&o.Bin, "bin", "", "hack/build.sh's BIN: <os>_<arch>/accelctl below it")
		fs.StringVar(&o.Version, "version", "", "release version, v<semver>")
		fs.StringVar(&o.URL, "url", "", "where the archives are downloaded from: each platform's uri is URL/<archive>")
		fs.StringVar(&o.Out, "out", "", "directory for the archives and accel.yaml")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		o.Platforms = fs.Args()
		manifest, err := Pack(o)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, manifest)
		return err
	case "verify":
		if len(args) != 2 {
			return errors.New(usage)
		}
		p, err := Verify(args[1])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s: %s %s, %d platforms, sha256 and %s version checked\n", args[1], p.Metadata.Name, p.Spec.Version, len(p.Spec.Platforms), executable)
		return err
	}
	return errors.New(usage)
}

// PackOptions are pack's flags and arguments.
type PackOptions struct {
	Bin, Version, URL, Out string
	Platforms              []string
}

// archiveName is the archive of one platform.
func archiveName(version, os, arch string) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", executable, version, os, arch)
}

// exe is the executable file name of name on os.
func exe(name, os string) string {
	if os == "windows" {
		return name + ".exe"
	}
	return name
}

// Pack writes the archives and the manifest, and returns the manifest's path. It checks every
// input before it writes anything, and writes the manifest last: a failed pack leaves no
// manifest naming archives that are not there.
func Pack(o PackOptions) (string, error) {
	if !semver.MatchString(o.Version) {
		return "", fmt.Errorf("-version %q: krew wants a semantic version with a leading v (v0.1.0)", o.Version)
	}
	if o.URL == "" || o.Out == "" || o.Bin == "" {
		return "", errors.New("-bin, -url and -out are required")
	}
	if len(o.Platforms) == 0 {
		return "", errors.New("no platforms (os/arch arguments)")
	}
	type input struct{ os, arch, binary string }
	var inputs []input
	seen := map[string]bool{}
	for _, p := range o.Platforms {
		if !supported[p] {
			return "", fmt.Errorf("platform %q: not one krew installs on (os/arch, e.g. linux/amd64)", p)
		}
		if seen[p] {
			return "", fmt.Errorf("platform %q given twice", p)
		}
		seen[p] = true
		goos, arch, _ := strings.Cut(p, "/")
		binary := filepath.Join(o.Bin, goos+"_"+arch, exe("accelctl", goos))
		if _, err := os.Stat(binary); err != nil {
			return "", fmt.Errorf("platform %s: %w (build it with hack/build.sh, as make release does)", p, err)
		}
		inputs = append(inputs, input{goos, arch, binary})
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return "", err
	}
	plugin := Plugin{
		APIVersion: apiVersion,
		Kind:       "Plugin",
		Metadata:   Metadata{Name: pluginName},
		Spec: PluginSpec{
			Version:          o.Version,
			Homepage:         homepage,
			ShortDescription: "Inspect and simulate accel-dra node group templates",
			Description:      description,
			Caveats:          caveats,
		},
	}
	for _, in := range inputs {
		name := archiveName(o.Version, in.os, in.arch)
		sum, err := writeArchive(filepath.Join(o.Out, name), in.binary, exe(executable, in.os))
		if err != nil {
			return "", fmt.Errorf("platform %s/%s: %w", in.os, in.arch, err)
		}
		plugin.Spec.Platforms = append(plugin.Spec.Platforms, Platform{
			Selector: Selector{MatchLabels: map[string]string{"os": in.os, "arch": in.arch}},
			URI:      strings.TrimSuffix(o.URL, "/") + "/" + name,
			Sha256:   sum,
			Bin:      exe(executable, in.os),
		})
	}
	b, err := yaml.Marshal(plugin)
	if err != nil {
		return "", err
	}
	manifest := filepath.Join(o.Out, pluginName+".yaml")
	return manifest, writeFile(manifest, b)
}

// writeArchive writes a .tar.gz holding binary as the executable name, and returns its sha256.
// The headers carry no time, owner or build machine: the bytes depend on the binary alone.
func writeArchive(archive, binary, name string) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	// gzip's default level: BestCompression saved under 2% of a 47 MB accelctl and took
	// several times as long.
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(zw)
	hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), writeFile(archive, buf.Bytes())
}

// writeFile replaces a file whole: a reader never sees half an archive or manifest.
func writeFile(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

// Verify checks a manifest and the archives beside it (see the package comment).
func Verify(manifest string) (*Plugin, error) {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return nil, err
	}
	var p Plugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", manifest, err)
	}
	if p.APIVersion != apiVersion || p.Kind != "Plugin" {
		return nil, fmt.Errorf("%s: %s %s, want %s Plugin", manifest, p.APIVersion, p.Kind, apiVersion)
	}
	if want := p.Metadata.Name + ".yaml"; filepath.Base(manifest) != want {
		return nil, fmt.Errorf("%s: krew wants the manifest of plugin %q in %s", manifest, p.Metadata.Name, want)
	}
	if !semver.MatchString(p.Spec.Version) {
		return nil, fmt.Errorf("%s: version %q is not v<semver>", manifest, p.Spec.Version)
	}
	if len(p.Spec.Platforms) == 0 {
		return nil, fmt.Errorf("%s: no platforms", manifest)
	}
	// First what reads no archive's contents (a digest is cheap), then the contents: the
	// other platforms' archives before this machine's, whose binary runs last.
	dir, host := filepath.Dir(manifest), runtime.GOOS+"/"+runtime.GOARCH
	archives := make([][]byte, len(p.Spec.Platforms))
	hostIndex := -1
	for i, pl := range p.Spec.Platforms {
		platform := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		if !supported[platform] || len(pl.Selector.MatchLabels) != 2 {
			return nil, fmt.Errorf("%s: platforms[%d]: selector %v is not one os and one arch krew installs on", manifest, i, pl.Selector.MatchLabels)
		}
		archive := filepath.Join(dir, path.Base(pl.URI))
		data, err := os.ReadFile(archive)
		if err != nil {
			return nil, fmt.Errorf("%s: platforms[%d] (%s): the archive of uri %s: %w", manifest, i, platform, pl.URI, err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != pl.Sha256 {
			return nil, fmt.Errorf("%s: platforms[%d] (%s): %s has sha256 %s, the manifest says %s", manifest, i, platform, archive, got, pl.Sha256)
		}
		archives[i] = data
		if platform == host {
			hostIndex = i
		}
	}
	if hostIndex < 0 {
		return nil, fmt.Errorf("%s: no platform for this machine (%s), whose binary verify runs", manifest, host)
	}
	order := make([]int, 0, len(archives))
	for i := range archives {
		if i != hostIndex {
			order = append(order, i)
		}
	}
	for _, i := range append(order, hostIndex) {
		pl := p.Spec.Platforms[i]
		bin, err := extract(archives[i], pl.Bin)
		if err != nil {
			return nil, fmt.Errorf("%s: platforms[%d]: %s: %w", manifest, i, path.Base(pl.URI), err)
		}
		if i == hostIndex {
			if err := runVersion(bin, pl.Bin, p.Spec.Version); err != nil {
				return nil, fmt.Errorf("%s: platforms[%d] (%s): %w", manifest, i, host, err)
			}
		}
	}
	return &p, nil
}

// extract returns the file name of a .tar.gz, which must be an executable regular file.
func extract(archive []byte, name string) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("no %s in the archive (the manifest's bin)", name)
		}
		if err != nil {
			return nil, err
		}
		if path.Clean(hdr.Name) != name {
			continue
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Mode&0o111 == 0 {
			return nil, fmt.Errorf("%s is not an executable file in the archive (mode %o)", name, hdr.Mode)
		}
		return io.ReadAll(tr)
	}
}

// runVersion runs the plugin as kubectl would, by its name, and checks the version it reports.
func runVersion(bin []byte, name, version string) error {
	dir, err := os.MkdirTemp("", "krew-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, bin, 0o755); err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(file, "version", "-o", "jsonpath={.clientVersion.gitVersion}")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s version: %w: %s", name, err, stderr.String())
	}
	if got := stdout.String(); got != version {
		return fmt.Errorf("%s version reports %q, the manifest %q", name, got, version)
	}
	return nil
}
