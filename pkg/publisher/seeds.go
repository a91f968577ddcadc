package publisher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
	"github.com/accel-dra/accel-dra/pkg/template"
)

// SeedSource is the seed named by a group's seed annotation (nodegroup.SeedAnnotation).
type SeedSource struct {
	// Name is the annotation's value.
	Name string
	// Annotations are the seed's annotations (nodegroup.SeedAnnotations); nil when Err is set.
	Annotations map[string]string
	// Err says why the seed cannot be used: no such seed, an unreadable or invalid file, or a
	// template over the budget.
	Err error
}

// seedFrom fills desired with the seed's annotations, or reports why it cannot. A group that
// also has a copy-from annotation gets neither: which one wins would be a guess.
func seedFrom(src *SeedSource, copyFrom bool, desired map[string]string) *Problem {
	var be *template.BudgetError
	switch {
	case copyFrom:
		return &Problem{ReasonSeedFailed, fmt.Sprintf("seed %q: the group also has %s; remove one of them", src.Name, nodegroup.CopyFromAnnotation)}
	case errors.As(src.Err, &be):
		return &Problem{ReasonOverBudget, fmt.Sprintf("seed %q: its template needs %d bytes, over the budget of %d bytes", src.Name, be.Size, be.Budget)}
	case src.Err != nil:
		return &Problem{ReasonSeedFailed, fmt.Sprintf("seed %q: %v", src.Name, src.Err)}
	}
	maps.Copy(desired, src.Annotations)
	return nil
}

// Seeds are the publisher's seeds, read from files when a group names one, so that a group
// with a broken seed gets a problem and the others are not held up:
//
//   - Dir/<name>.yaml is a NodeGroupSeed (api/templateconfig/v1alpha1): capacity, labels and
//     taints, and the devices as resourceSlices or template;
//   - TemplatesDir/<name>.json, when the seed gives no devices, is its template document, as
//     `accel-dra-kubelet-plugin generate-template` writes it for the seed's shape (the Helm
//     chart runs that in an init container of the plugin image: the publisher is a static
//     binary without the plugin's device model).
type Seeds struct {
	Dir          string
	TemplatesDir string
}

// Load reads the seed name.
func (s Seeds) Load(name string) (*seedv1alpha1.NodeGroupSeed, error) {
	if s.Dir == "" {
		return nil, errors.New("the publisher has no seeds (--seeds-dir)")
	}
	// The name comes from an annotation and becomes a file name: nothing but a DNS label.
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("invalid seed name: %s", strings.Join(errs, "; "))
	}
	path := filepath.Join(s.Dir, name+".yaml")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no such seed (%s does not exist)", path)
	}
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := yaml.UnmarshalStrict(data, &fields); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := fields["template"]; !ok && fields["resourceSlices"] == nil {
		dir := s.TemplatesDir
		if dir == "" {
			dir = s.Dir
		}
		tpath := filepath.Join(dir, name+".json")
		doc, err := os.ReadFile(tpath)
		if err != nil {
			return nil, fmt.Errorf("%s gives no devices, and its generated template cannot be read: %w", path, err)
		}
		if !json.Valid(doc) {
			return nil, fmt.Errorf("%s: not JSON", tpath)
		}
		fields["template"] = doc
		if data, err = json.Marshal(fields); err != nil {
			return nil, err
		}
	}
	seed, err := seedv1alpha1.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return seed, nil
}

// Source returns the seed name as the plan's input: its annotations as the publisher writes
// them with cfg, or why it has none.
func (s Seeds) Source(name string, cfg Config) *SeedSource {
	src := &SeedSource{Name: name}
	seed, err := s.Load(name)
	if err == nil {
		src.Annotations, err = nodegroup.SeedAnnotations(seed, cfg.Budget, cfg.GPUDriver)
	}
	if err != nil {
		src.Annotations, src.Err = nil, err
	}
	return src
}
