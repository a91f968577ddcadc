package helm

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	helmregistry "helm.sh/helm/v4/pkg/registry"
)

// TestPackageAndPush: `make chart` writes accel-dra-<version>.tgz that loads back with the
// chart's files and the version the images are tagged after; `make chart-push` puts it into an
// OCI registry (here one in the test process) from where Helm's registry client pulls the same
// bytes, as `helm install oci://...` would.
func TestPackageAndPush(t *testing.T) {
	dir := t.TempDir()
	tgz, err := Package(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "accel-dra-"+c.Metadata.Version+".tgz"); tgz != want {
		t.Errorf("packaged %s, want %s", tgz, want)
	}
	back, err := loader.Load(tgz)
	if err != nil {
		t.Fatal(err)
	}
	if back.Metadata.Version != c.Metadata.Version || back.Metadata.AppVersion != c.Metadata.AppVersion || len(back.Templates) != len(c.Templates) {
		t.Errorf("the package has version %s, appVersion %s, %d templates; the chart %s, %s, %d",
			back.Metadata.Version, back.Metadata.AppVersion, len(back.Templates), c.Metadata.Version, c.Metadata.AppVersion, len(c.Templates))
	}
	if back.Schema == nil {
		t.Error("the package lost values.schema.json")
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("HELM_REGISTRY_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	if _, err := Push(tgz, "https://"+host+"/charts", true, io.Discard); err == nil {
		t.Error("pushed to a repository that is not oci://")
	}
	ref, err := Push(tgz, "oci://"+host+"/charts/", true, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := host + "/charts/accel-dra:" + c.Metadata.Version; ref != want {
		t.Errorf("pushed %s, want %s", ref, want)
	}
	client, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := client.Pull(ref)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(tgz)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Chart == nil || string(pulled.Chart.Data) != string(data) {
		t.Error("the chart pulled from the registry is not the one pushed")
	}
}
