// Package buildinfo holds what hack/build.sh stamps into every binary at link time, so that
// accel_dra_build_info and `accelctl version` report the same version and revision (the
// binaries are built with -buildvcs=false in CI and in the image, which leaves the Go
// toolchain's own VCS stamp empty).
package buildinfo

// Version and Revision are set with -ldflags -X by hack/build.sh; a plain go build leaves
// "dev" and "unknown".
var (
	Version  = "dev"
	Revision = "unknown"
)

// Stamped reports whether hack/build.sh set Version and Revision.
func Stamped() bool { return Version != "dev" || Revision != "unknown" }
