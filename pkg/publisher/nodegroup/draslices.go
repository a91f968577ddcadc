package nodegroup

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/accel-dra/accel-dra/pkg/template"
)

// DRAResourceSlicesKey holds the ResourceSlices of the group's template node in the form the
// reader proposed to the Cluster Autoscaler's clusterapi provider takes (a proposed key, not
// one the autoscaler defines; docs/upstream-proposal.md): a versioned JSON document
// {"version":1,"slices":[...]} of resource.k8s.io/v1 ResourceSliceSpecs without nodeName, pool
// generation and resourceSliceCount, which the reader derives, or the standard base64 of that
// JSON gzipped when it is larger than template.CompressThreshold (JSON starts with '{', base64
// never does). A spec whose pool name is empty belongs to the pool named after the template
// node. Values are the template's, identity placeholders included: the reader rewrites none, as
// the autoscaler rewrites none when it copies a real node.
const DRAResourceSlicesKey = CapacityPrefix + "dra-resource-slices"

// DRAResourceSlicesVersion is the version of the DRAResourceSlicesKey document written. A
// reader uses only a version it knows, so a change that older readers would misread needs a
// new version (and writing the old one for as long as those readers run).
const DRAResourceSlicesVersion = 1

// DRAResourceSlicesDocument is the DRAResourceSlicesKey document. Slices are kept as decoded
// maps so that the pool can be written as the reader wants it (no generation or count).
type DRAResourceSlicesDocument struct {
	Version int              `json:"version"`
	Slices  []map[string]any `json:"slices"`
}

// poolStandIn names the template node when a driver has several pools per node, which must
// have names of their own; the reader takes them as they are.
const poolStandIn = "template"

// AddDRAResourceSlices adds DRAResourceSlicesKey for t to ann, the annotations t.Encode(budget)
// returned, when all of them together stay within budget (0: template.DefaultBudget);
// otherwise it returns a *template.BudgetError and leaves ann as it was.
func AddDRAResourceSlices(ann map[string]string, t *template.Template, budget int) error {
	if budget == 0 {
		budget = template.DefaultBudget
	}
	extra, err := DRAResourceSlices(t)
	if err != nil {
		return err
	}
	size := 0
	for _, m := range []map[string]string{ann, extra} {
		for k, v := range m {
			size += len(k) + len(v)
		}
	}
	if size > budget {
		return &template.BudgetError{Size: size, Budget: budget}
	}
	maps.Copy(ann, extra)
	return nil
}

// DRAResourceSlices returns DRAResourceSlicesKey for t; no key for a nil template or one
// without drivers.
func DRAResourceSlices(t *template.Template) (map[string]string, error) {
	if t == nil || len(t.Drivers) == 0 {
		return map[string]string{}, nil
	}
	slices, err := t.ResourceSlicesVerbatim(poolStandIn)
	if err != nil {
		return nil, err
	}
	single := map[string]bool{}
	for _, d := range t.Drivers {
		single[d.Name] = d.PoolSuffix == ""
	}
	specs := make([]map[string]any, 0, len(slices))
	for _, s := range slices {
		spec := s.Spec
		spec.NodeName = nil
		doc, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		pool := map[string]any{}
		if !single[spec.Driver] {
			pool["name"] = spec.Pool.Name
		}
		m["pool"] = pool
		specs = append(specs, m)
	}
	doc, err := json.Marshal(DRAResourceSlicesDocument{Version: DRAResourceSlicesVersion, Slices: specs})
	if err != nil {
		return nil, err
	}
	value := string(doc)
	if len(doc) > template.CompressThreshold {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return nil, err
		}
		if _, err := zw.Write(doc); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		value = base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	return map[string]string{DRAResourceSlicesKey: value}, nil
}
