package helm

import (
	"fmt"
	"io"
	"os"
	"strings"

	chartv2util "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/helmpath"
	"helm.sh/helm/v4/pkg/registry"
)

// Package writes the chart into dir as <name>-<version>.tgz, as `helm package` does, and
// returns the file's path (`make chart`).
func Package(dir string) (string, error) {
	c, err := Load()
	if err != nil {
		return "", err
	}
	path, err := chartv2util.Save(c, dir)
	if err != nil {
		return "", fmt.Errorf("packaging chart %s: %w", ChartName, err)
	}
	return path, nil
}

// Push pushes a packaged chart to the OCI repository repo ("oci://registry.example/charts"), as
// `helm push` does, with the credentials of `helm registry login` (HELM_REGISTRY_CONFIG), and
// returns the reference it pushed: <repo>/<name>:<version> (`make chart-push`).
func Push(tgz, repo string, plainHTTP bool, log io.Writer) (string, error) {
	data, err := os.ReadFile(tgz)
	if err != nil {
		return "", err
	}
	base, ok := strings.CutPrefix(repo, registry.OCIScheme+"://")
	if !ok || base == "" {
		return "", fmt.Errorf("chart repository %q: want %s://<registry>/<path>", repo, registry.OCIScheme)
	}
	c, err := Load()
	if err != nil {
		return "", err
	}
	opts := []registry.ClientOption{registry.ClientOptWriter(log), registry.ClientOptCredentialsFile(registryConfig())}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return "", err
	}
	ref := fmt.Sprintf("%s/%s:%s", strings.TrimSuffix(base, "/"), c.Name(), c.Metadata.Version)
	if _, err := client.Push(data, ref); err != nil {
		return "", fmt.Errorf("pushing %s to %s: %w", tgz, ref, err)
	}
	return ref, nil
}

// registryConfig is where `helm registry login` keeps credentials. (Helm's pkg/cli says the
// same, but it links Go's plugin package, which makes a binary that also links go-nvml fail at
// start without NVML: see pkg/accelctl's TestDoesNotLinkGoPlugins.)
func registryConfig() string {
	if p := os.Getenv("HELM_REGISTRY_CONFIG"); p != "" {
		return p
	}
	return helmpath.ConfigPath("registry/config.json")
}
