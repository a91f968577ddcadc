package accelctl

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/version"

	"github.com/accel-dra/accel-dra/pkg/buildinfo"
)

func newVersionCommand(streams IOStreams) *cobra.Command {
	var output Output
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print accelctl's version",
		Long: `Prints the version of accelctl itself (it does not connect to a cluster): the version and
revision hack/build.sh stamped into the binary, else the module version and the VCS revision the
Go toolchain recorded. -o json or yaml prints
{"clientVersion": ...} with the fields of kubectl version's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "", "json", "yaml"); err != nil {
				return err
			}
			bi, _ := debug.ReadBuildInfo()
			return WriteVersion(streams.Out, Version(bi), output)
		},
	}
	addOutputFlags(cmd.Flags(), &output, "Output format: json, yaml, jsonpath=... or go-template=... (default: one line).")
	return cmd
}

// Version is accelctl's version from its build information (nil when the binary has none).
func Version(bi *debug.BuildInfo) version.Info {
	info := version.Info{
		GitVersion: "(devel)",
		Compiler:   runtime.Compiler,
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion:  runtime.Version(),
	}
	if buildinfo.Stamped() {
		// hack/build.sh's stamp: the binaries are built with -buildvcs=false (CI, the image),
		// which leaves the toolchain's VCS settings below empty.
		info.GitVersion, info.GitCommit = buildinfo.Version, buildinfo.Revision
	}
	if bi == nil {
		return info
	}
	if bi.Main.Version != "" && !buildinfo.Stamped() {
		info.GitVersion = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if !buildinfo.Stamped() {
				info.GitCommit = s.Value
			}
		case "vcs.time":
			info.BuildDate = s.Value
		case "vcs.modified":
			info.GitTreeState = "clean"
			if s.Value == "true" {
				info.GitTreeState = "dirty"
			}
		}
	}
	return info
}

// WriteVersion prints a version as one line, or as kubectl version's {"clientVersion": ...}.
func WriteVersion(w io.Writer, v version.Info, output Output) error {
	if output.Format == "" {
		commit := v.GitCommit
		if commit == "" {
			commit = "unknown"
		}
		if v.GitTreeState == "dirty" {
			commit += "-dirty"
		}
		_, err := fmt.Fprintf(w, "accelctl %s (revision %s, %s, %s)\n", v.GitVersion, commit, v.GoVersion, v.Platform)
		return err
	}
	return writeObject(w, output, struct {
		ClientVersion version.Info `json:"clientVersion"`
	}{v})
}
