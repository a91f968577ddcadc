// Package kubeclient builds API clients for the project's binaries with one set of flags.
package kubeclient

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options are the API client flags.
type Options struct {
	Kubeconfig string
	QPS        float32
	Burst      int
	// Protobuf makes the client send and ask for Kubernetes' protobuf encoding, as the kubelet
	// and the control plane's own components do: it is cheaper to encode and decode on both
	// ends than JSON. Only for clients of built-in types: custom resources have no protobuf
	// encoding. Not a flag.
	Protobuf bool
}

// DefaultOptions returns the node plugin's options. Their rate limit is far above what a node
// plugin needs: the kubelet plugin helper GETs each claim once per prepare, and client-go's
// default of 5 QPS would cap a node at five claims per second. Server-side API priority and
// fairness protects the apiserver. The plugin talks only to built-in types (claims, slices,
// nodes, events), so it uses protobuf.
func DefaultOptions() Options { return Options{QPS: 1000, Burst: 2000, Protobuf: true} }

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; empty means in-cluster configuration.")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "Sustained queries per second to the API server (negative: no client-side limit).")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Burst of queries to the API server above --kube-api-qps.")
}

// RESTConfig loads the configuration and applies the rate limits and the encoding.
func (o *Options) RESTConfig(userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	cfg.UserAgent = userAgent
	if o.Protobuf {
		UseProtobuf(cfg)
	}
	return cfg, nil
}

// UseProtobuf makes cfg's clients use protobuf, with JSON accepted for what the server cannot
// encode otherwise.
func UseProtobuf(cfg *rest.Config) {
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}
