package npumock

import (
	"fmt"
	"os"
	"path/filepath"
)

// DriverRoot is where WriteDriverRoot puts the Ascend driver tree of profileName under dir.
func DriverRoot(dir, profileName string) string {
	return filepath.Join(dir, dirName(profileName), "driver-root")
}

// WriteDriverRoot generates, under DriverRoot(dir, profileName), the files of an installed
// Ascend driver of the profile's version where the Ascend installer puts them: the driver's
// libraries in /usr/local/Ascend/driver/lib64, its version.info, /etc/ascend_install.info,
// the DCMI library in /usr/local/dcmi and /usr/local/bin/npu-smi. Nothing in it can run; it is
// there for the plugin to find and mount (pkg/cdi/ascend). Existing content is replaced.
func WriteDriverRoot(dir, profileName string) (string, error) {
	prof, _, err := lookup(profileName)
	if err != nil {
		return "", err
	}
	if dir == "" {
		return "", fmt.Errorf("NPU mock driver root: no directory")
	}
	root := DriverRoot(dir, profileName)
	if err := os.RemoveAll(root); err != nil {
		return "", fmt.Errorf("NPU mock driver root: %w", err)
	}
	v := prof.driverVersion
	w := &writer{}
	for _, lib := range []string{"libascend_hal.so", "libdrvdsmi_host.so", "libdcmi.so", "libc_sec.so", "libmmpa.so"} {
		w.file(filepath.Join(root, "usr/local/Ascend/driver/lib64/driver", lib), "mock Ascend library "+v+"\n")
	}
	w.file(filepath.Join(root, "usr/local/Ascend/driver/version.info"), fmt.Sprintf("Version=%s\nascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\nlog_version=1.0\nprof_version=2.0\ndvppkernels_version=1.1\ntsfw_version=1.0\nrequired_package_amp_version=\"%s\"\n", v, v))
	w.file(filepath.Join(root, "etc/ascend_install.info"), "UserName=HwHiAiUser\nUserGroup=HwHiAiUser\nDriver_Install_Type=full\nDriver_Install_Path_Param=/usr/local/Ascend\nDriver_Install_For_All=no\n")
	w.file(filepath.Join(root, "usr/local/dcmi/libdcmi.so"), "mock DCMI library "+v+"\n")
	w.file(filepath.Join(root, "usr/local/dcmi/dcmi_interface_api.h"), "/* mock DCMI header */\n")
	w.file(filepath.Join(root, "usr/local/bin/npu-smi"), "#!/bin/sh\necho 'mock npu-smi "+v+"'\n")
	if w.err == nil {
		w.err = os.Chmod(filepath.Join(root, "usr/local/bin/npu-smi"), 0o755)
	}
	if w.err != nil {
		return "", fmt.Errorf("NPU mock driver root %s: %w", root, w.err)
	}
	return root, nil
}
