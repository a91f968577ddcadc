package accelctl

import (
	"path/filepath"
	"strings"
)

// Name is accelctl's name when run as itself.
const Name = "accelctl"

// PluginExecutable is accelctl's executable name as a kubectl plugin: for `kubectl accel ...`
// kubectl runs the executable named kubectl-accel (kubectl-accel.exe on Windows) that it finds on
// $PATH, with the arguments after "accel" and its own path as the program name
// (https://kubernetes.io/docs/tasks/extend-kubectl/kubectl-plugins/). The release archives
// (`make release`) ship accelctl under this name, which krew installs (hack/krew).
const PluginExecutable = "kubectl-accel"

// PluginName is what a user types for accelctl as a kubectl plugin.
const PluginName = "kubectl accel"

// CommandName is the name accelctl's usage, help and errors show when its executable is argv0:
// "kubectl accel" for kubectl-accel (as kubectl runs it, by its path), so that the commands a
// plugin user is shown are the ones they type, else "accelctl" (a copy under any other name
// behaves as accelctl).
func CommandName(argv0 string) string {
	base := filepath.Base(argv0)
	if ext := filepath.Ext(base); strings.EqualFold(ext, ".exe") {
		base = strings.TrimSuffix(base, ext)
	}
	if base == PluginExecutable {
		return PluginName
	}
	return Name
}
