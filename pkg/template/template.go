// Package template turns the ResourceSlices of one representative node into a node-independent,
// versioned template that is stored as annotations on a Cluster API MachineDeployment, and turns
// such annotations back into the ResourceSlices of a template node.
//
// The Cluster Autoscaler needs the template to scale a node group up from zero for pods whose
// ResourceClaims select devices by attributes, capacity or matchAttribute constraints. The decode
// side (Decode, Template.ResourceSlices) is meant to be vendored by an autoscaler provider, so the
// whole package depends only on k8s.io/api, k8s.io/apimachinery (and its sigs.k8s.io/json) and
// the standard library. docs/template-format.md is the contract.
package template

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// Format identity. A decoder accepts exactly the versions it knows; see docs/template-format.md
// for the rules on introducing a new one.
const (
	Group      = "template.accel-dra.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "NodeGroupTemplate"
)

// Annotation keys written by Encode and read by Decode.
const (
	AnnotationPrefix = Group + "/"
	// VersionAnnotation holds the format version (Version) so a reader can reject a template it
	// does not understand before it decompresses anything.
	VersionAnnotation = AnnotationPrefix + "version"
	// HashAnnotation holds "sha256:<hex>" of the uncompressed JSON document. A controller
	// compares it with Template.Hash to skip no-op writes; it does not depend on the gzip
	// implementation, unlike the compressed bytes.
	HashAnnotation = AnnotationPrefix + "hash"
	// EncodingAnnotation says how ResourceSlicesAnnotation is encoded: EncodingJSON or
	// EncodingGzipBase64. Absent means EncodingJSON.
	EncodingAnnotation = AnnotationPrefix + "encoding"
	// ResourceSlicesAnnotation holds the template document.
	ResourceSlicesAnnotation = AnnotationPrefix + "resourceslices"
)

// Values of EncodingAnnotation.
const (
	EncodingJSON       = "json"
	EncodingGzipBase64 = "gzip+base64"
)

// Limits. They are part of the format: a writer must stay within them and a reader enforces them.
const (
	// DefaultBudget is the default size limit of all annotations Encode writes together (keys
	// plus values). Cluster API copies MachineDeployment annotations to its MachineSets, and the
	// API server limits all annotations of an object to 256 KiB together, so the template must
	// leave most of that to others.
	DefaultBudget = 64 << 10
	// MaxBudget is the API server's limit for all annotations of one object; a larger budget
	// would only produce objects the API server rejects.
	MaxBudget = 256 << 10
	// CompressThreshold is the JSON size above which Encode gzips the document. Smaller
	// documents stay readable with kubectl.
	CompressThreshold = 8 << 10
	// MaxDocumentSize caps the uncompressed JSON document (decompression bomb protection).
	MaxDocumentSize = 1 << 20
	// MaxDevices caps the devices of a template, over all drivers and pools. The autoscaler
	// simulates with these devices, so the cap bounds its work too.
	MaxDevices = 4096
	// MaxCounterSets caps the shared counter sets of a template, over all drivers and pools.
	MaxCounterSets = 1024
	// MaxPools caps the driver entries (driver and pool pairs) of a template.
	MaxPools = 64
	// MaxIdentityAttributes caps Template.IdentityAttributes.
	MaxIdentityAttributes = 64
	// MaxPlaceholderLength is the longest string or version value an identity attribute may
	// have in a template: ResourceSlices appends a 9-character node-specific suffix and the
	// result must stay within the API's 64-character limit.
	MaxPlaceholderLength = resourceapi.DeviceAttributeMaxValueLength - nodeSuffixLength
)

// Template is the node-independent description of the devices of one node group: the
// ResourceSlices of a representative node without node identity. It is also the JSON document
// stored in ResourceSlicesAnnotation.
type Template struct {
	// APIVersion is always APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is always Kind.
	Kind string `json:"kind"`
	// IdentityAttributes are the fully qualified names of the device attributes whose values
	// are placeholders (sorted). ResourceSlices replaces their string and version values with
	// values unique to the template node.
	IdentityAttributes []resourceapi.FullyQualifiedName `json:"identityAttributes,omitempty"`
	// Drivers has one entry per driver and pool of the node, sorted by name and pool suffix.
	// Nearly every driver publishes a single pool per node.
	Drivers []Driver `json:"drivers"`
}

// Driver is the content of one pool of one DRA driver: the devices and shared counters of all
// its ResourceSlices merged. How they were split into slices is not kept; ResourceSlices splits
// them again within the API's limits.
type Driver struct {
	// Name is the DRA driver name (ResourceSlice spec.driver).
	Name string `json:"name"`
	// PoolSuffix is appended to the node name to form the pool name. It is empty unless the
	// driver publishes more than one pool per node.
	PoolSuffix string `json:"poolSuffix,omitempty"`
	// PartitionTypeAttribute is set on every slice of the pool that has devices which consume
	// counters (ResourceSlice spec.partitionTypeAttribute).
	PartitionTypeAttribute *resourceapi.FullyQualifiedName `json:"partitionTypeAttribute,omitempty"`
	// SkipNodeOperations is set on every device slice of the pool, sorted.
	SkipNodeOperations []resourceapi.SkipNodeOperation `json:"skipNodeOperations,omitempty"`
	// SharedCounters are the counter sets of the pool, sorted by name.
	SharedCounters []resourceapi.CounterSet `json:"sharedCounters,omitempty"`
	// Devices are the devices of the pool in the resource.k8s.io/v1 shape, sorted by name.
	Devices []resourceapi.Device `json:"devices,omitempty"`
}

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
