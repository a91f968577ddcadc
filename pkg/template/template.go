// Package template turns the ResourceSlices of one representative node into a node-independent,
// versioned template that is stored as annotations on a Cluster API MachineDeployment, and turns
// such annotations back into the ResourceSlices of a template node.
//
// The Cluster Autoscaler needs the template to scale a node group up from zero for pods whose
// ResourceClaims select devices by attributes, capacity or matchAttribute constraints. The
// reader an autoscaler provider takes is the module github.com/accel-dra/accel-dra/api/template, which builds against the
// autoscaler's older k8s.io/api; this package is the writer (Build, Encode) on the project's
// k8s.io/api, and its Decode is the reader's plus the API server's full validation of the
// fields that only this k8s.io/api has. docs/template-format.md is the contract.
package template

import (
	"fmt"

	apitemplate "github.com/accel-dra/accel-dra/api/template"
)

// Format identity, annotation keys, encodings and the reader's limits are the reader module's.
const (
	Group      = apitemplate.Group
	Version    = apitemplate.Version
	APIVersion = apitemplate.APIVersion
	Kind       = apitemplate.Kind

	AnnotationPrefix         = apitemplate.AnnotationPrefix
	VersionAnnotation        = apitemplate.VersionAnnotation
	HashAnnotation           = apitemplate.HashAnnotation
	EncodingAnnotation       = apitemplate.EncodingAnnotation
	ResourceSlicesAnnotation = apitemplate.ResourceSlicesAnnotation

	EncodingJSON       = apitemplate.EncodingJSON
	EncodingGzipBase64 = apitemplate.EncodingGzipBase64

	MaxBudget             = apitemplate.MaxBudget
	MaxDocumentSize       = apitemplate.MaxDocumentSize
	MaxDevices            = apitemplate.MaxDevices
	MaxCounterSets        = apitemplate.MaxCounterSets
	MaxPools              = apitemplate.MaxPools
	MaxIdentityAttributes = apitemplate.MaxIdentityAttributes
	MaxPlaceholderLength  = apitemplate.MaxPlaceholderLength
)

// Writer limits.
const (
	// DefaultBudget is the default size limit of all annotations Encode writes together (keys
	// plus values). Cluster API copies MachineDeployment annotations to its MachineSets, and the
	// API server limits all annotations of an object to 256 KiB together, so the template must
	// leave most of that to others.
	DefaultBudget = 64 << 10
	// CompressThreshold is the JSON size above which Encode gzips the document. Smaller
	// documents stay readable with kubectl.
	CompressThreshold = 8 << 10
)

// Template is the reader module's template with the writer's methods (Encode, Hash, Equal).
// The reader module is compiled against this module's k8s.io/api here, so its device types are
// this module's and a conversion to *apitemplate.Template is free.
type Template apitemplate.Template

// Driver is one driver and pool entry of a template.
type Driver = apitemplate.Driver

// api returns t as the reader module's type.
func (t *Template) api() *apitemplate.Template { return (*apitemplate.Template)(t) }

// BudgetError is returned by Encode when the annotations would exceed the budget. Nothing is
// written in that case: a truncated template would make the autoscaler simulate a node with
// fewer devices than a real one.
type BudgetError struct {
	// Size is the size of all annotations (keys plus values) after compression; or, when the
	// uncompressed document is over MaxDocumentSize (which Decode would refuse), its size.
	Size int
	// Budget is the limit that was exceeded: the budget given to Encode, or MaxDocumentSize.
	Budget int
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("node group template annotations need %d bytes, over the budget of %d bytes", e.Size, e.Budget)
}
