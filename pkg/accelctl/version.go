package accelctl

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/version"
)

func newVersionCommand(streams IOStreams) *cobra.Command {
	output := ""
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print accelctl's version",
		Long: `Prints the version of accelctl itself (it does not connect to a cluster): the module version
and the VCS revision the Go toolchain recorded in the binary. -o json or yaml prints
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
	cmd.Flags().StringVarP(&output, "output", "o", output, "Output format: json or yaml (default: one line).")
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
	if bi == nil {
		return info
	}
	if bi.Main.Version != "" {
		info.GitVersion = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.GitCommit = s.Value
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
func WriteVersion(w io.Writer, v version.Info, output string) error {
	if output == "" {
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
