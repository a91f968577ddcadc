package kubeclient

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestRESTConfig(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                string
		opts                Options
		wantContent, accept string
	}{
		{"node plugin defaults", DefaultOptions(), "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf,application/json"},
		// The publisher reads Cluster API custom resources, which have no protobuf encoding.
		{"JSON", Options{QPS: 50, Burst: 100}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Kubeconfig = kubeconfig
			got, err := o.RESTConfig("agent/1")
			if err != nil {
				t.Fatal(err)
			}
			if got.ContentType != tc.wantContent || got.AcceptContentTypes != tc.accept {
				t.Errorf("content type %q, accept %q; want %q, %q", got.ContentType, got.AcceptContentTypes, tc.wantContent, tc.accept)
			}
			if got.QPS != o.QPS || got.Burst != o.Burst || got.UserAgent != "agent/1" || got.Host != "https://127.0.0.1:6443" || got.BearerToken != "t" {
				t.Errorf("config %+v does not reflect the options %+v", got, o)
			}
		})
	}
}

func TestRESTConfigErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	o := Options{Kubeconfig: missing}
	if _, err := o.RESTConfig("agent"); err == nil {
		t.Errorf("RESTConfig with a missing kubeconfig succeeded")
	}
	// Outside a pod, without a kubeconfig, there is no configuration to be had.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
		t.Skip("running in a pod")
	}
	if _, err := (&Options{}).RESTConfig("agent"); err == nil {
		t.Errorf("RESTConfig without kubeconfig outside a cluster succeeded")
	}
}
