package accelctl

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	seedv1alpha1 "github.com/accel-dra/accel-dra/api/templateconfig/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/publisher/nodegroup"
)

// SeedOptions tune SeedAnnotations.
type SeedOptions struct {
	// Budget of the template annotations; 0 means template.DefaultBudget.
	Budget int
	// GPUDriver is the driver dra-driver (with gpu-count) names when the seed has whole
	// devices of more than one driver; otherwise it names the one that has them
	// (nodegroup.DRA). Empty writes neither.
	GPUDriver string
}

// SeedAnnotations turns a seed into the annotations the publisher would write for a group of
// such nodes (nodegroup.SeedAnnotations, which the publisher's seed mode writes too).
func SeedAnnotations(seed *seedv1alpha1.NodeGroupSeed, o SeedOptions) (map[string]string, error) {
	return nodegroup.SeedAnnotations(seed, o.Budget, o.GPUDriver)
}

// FormatAnnotations prints annotations as sorted "key: value" YAML, values quoted.
func FormatAnnotations(ann map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		fmt.Fprintf(&b, "%s: %s\n", k, strconv.Quote(ann[k]))
	}
	return b.String()
}
