package nvidia

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// HookName is the NVIDIA container toolkit's hook binary, which the plugin ships beside itself
// (the image's /usr/bin, make build's bin/).
const HookName = "nvidia-cdi-hook"

// InstallHook copies the hook at src, the one the plugin ships, into dir on the node, where
// the container runtime runs it from the CDI specs' hooks, and returns the installed path.
//
// A node need not have the toolkit, nor the version whose hooks the specs name: v1.19's
// enable-cuda-compat and disable-device-node-modification need a hook of 1.17.5 / 1.17.8 or
// later, and only 1.18 and later tolerate hooks they do not know. The plugin's own hook always
// knows the hooks its generator writes. The copy is content-addressed
// (<dir>/<sha256 prefix>/nvidia-cdi-hook): during a rolling update two plugin versions each
// write specs that name their own hook, and neither replaces the other's under a running
// container. It is written to a temporary file and renamed, so a runtime never runs half a
// file; an existing copy is left as it is.
func InstallHook(src, dir string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("installing %s: %s is not a regular file", HookName, src)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("installing %s: reading %s: %w", HookName, src, err)
	}
	dest := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:16], HookName)
	if st, err := os.Stat(dest); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return dest, nil
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+HookName+"-*")
	if err != nil {
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	if _, err := io.Copy(tmp, f); err != nil {
		tmp.Close()
		return "", fmt.Errorf("installing %s into %s: %w", HookName, dest, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return "", fmt.Errorf("installing %s: %w", HookName, err)
	}
	return dest, nil
}
