package accelctl

import (
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientGetter is what the commands connect with: the client configuration and the kubeconfig
// loader (for the namespace the flags or the context select).
type ClientGetter interface {
	ToRESTConfig() (*rest.Config, error)
	ToRawKubeConfigLoader() clientcmd.ClientConfig
}

// ConnectionFlags are kubectl's connection flags (--kubeconfig, --context, --cluster, --user,
// --namespace/-n, --server/-s, --request-timeout, the credential and TLS flags), bound with
// client-go's clientcmd. Not cli-runtime's ConfigFlags: those link kustomize, which links Go's
// plugin package, which makes the linker bind every symbol at start-up, and a binary that links
// accelctl beside go-nvml (whose NVML symbols are resolved lazily, when a driver has them) then
// fails to start on machines without NVML (e2e/mig, e2e/sharing).
type ConnectionFlags struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
}

// NewConnectionFlags returns flags that load $KUBECONFIG, ~/.kube/config or the in-cluster
// configuration unless --kubeconfig says otherwise.
func NewConnectionFlags() *ConnectionFlags {
	return &ConnectionFlags{loading: clientcmd.NewDefaultClientConfigLoadingRules()}
}

// AddFlags adds the flags to fs.
func (f *ConnectionFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use (default $KUBECONFIG, ~/.kube/config or in-cluster).")
	clientcmd.BindOverrideFlags(&f.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
}

// ToRawKubeConfigLoader is the kubeconfig the flags select, with their overrides.
func (f *ConnectionFlags) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.loading, &f.overrides)
}

// ToRESTConfig is the client configuration the flags select.
func (f *ConnectionFlags) ToRESTConfig() (*rest.Config, error) {
	return f.ToRawKubeConfigLoader().ClientConfig()
}
