// Package template reads the node group templates that accel-dra's template publisher writes as
// annotations on Cluster API MachineDeployments and MachineSets, and builds the ResourceSlices of
// a template node from them, so that a Cluster Autoscaler provider can scale a node group up from
// zero for pods whose ResourceClaims select devices by attributes, capacity or matchAttribute
// constraints.
//
// It is a module of its own that depends only on k8s.io/api, k8s.io/apimachinery (and its
// sigs.k8s.io/json) and the standard library, at the oldest Kubernetes minor that the Cluster
// Autoscaler builds with, so that a provider can require it without pulling in anything else.
// It compiles against that minor and every newer one: it names no API field that an older
// k8s.io/api lacks, and decodes strictly into whatever k8s.io/api it is built with, so a template
// that uses a field the build's API does not have is refused by name rather than half-read.
// docs/template-format.md in the accel-dra repository is the contract.
package template

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"

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

// Annotation keys of a template.
const (
	AnnotationPrefix = Group + "/"
	// VersionAnnotation holds the format version (Version) so a reader can reject a template it
	// does not understand before it decompresses anything.
	VersionAnnotation = AnnotationPrefix + "version"
	// HashAnnotation holds "sha256:<hex>" of the uncompressed JSON document (DocumentHash).
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
	// MaxBudget is the API server's limit for all annotations of one object; the document
	// annotation cannot be larger.
	MaxBudget = 256 << 10
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

// ErrNoTemplate is returned by Decode when the annotations hold no template.
var ErrNoTemplate = errors.New("no node group template in annotations")

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
	// counters (ResourceSlice spec.partitionTypeAttribute, Kubernetes 1.37 and newer).
	PartitionTypeAttribute *resourceapi.FullyQualifiedName `json:"partitionTypeAttribute,omitempty"`
	// SkipNodeOperations is set on every device slice of the pool, sorted
	// (ResourceSlice spec.skipNodeOperations, Kubernetes 1.37 and newer). Plain strings, because
	// older k8s.io/api releases have no type for them.
	SkipNodeOperations []string `json:"skipNodeOperations,omitempty"`
	// SharedCounters are the counter sets of the pool, sorted by name.
	SharedCounters []resourceapi.CounterSet `json:"sharedCounters,omitempty"`
	// Devices are the devices of the pool in the resource.k8s.io/v1 shape, sorted by name.
	Devices []resourceapi.Device `json:"devices,omitempty"`
}

// DocumentHash returns "sha256:<hex>" of an uncompressed template document, the value of
// HashAnnotation.
func DocumentHash(doc []byte) string {
	sum := sha256.Sum256(doc)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DeepCopy returns a copy of t that shares no memory with it.
func (t *Template) DeepCopy() *Template {
	c := &Template{
		APIVersion:         t.APIVersion,
		Kind:               t.Kind,
		IdentityAttributes: append(t.IdentityAttributes[:0:0], t.IdentityAttributes...),
	}
	if t.Drivers != nil {
		c.Drivers = make([]Driver, len(t.Drivers))
	}
	for i, d := range t.Drivers {
		cd := Driver{Name: d.Name, PoolSuffix: d.PoolSuffix}
		if d.PartitionTypeAttribute != nil {
			cd.PartitionTypeAttribute = new(*d.PartitionTypeAttribute)
		}
		if d.SkipNodeOperations != nil {
			cd.SkipNodeOperations = append(d.SkipNodeOperations[:0:0], d.SkipNodeOperations...)
		}
		if d.SharedCounters != nil {
			cd.SharedCounters = make([]resourceapi.CounterSet, len(d.SharedCounters))
			for j := range d.SharedCounters {
				d.SharedCounters[j].DeepCopyInto(&cd.SharedCounters[j])
			}
		}
		if d.Devices != nil {
			cd.Devices = make([]resourceapi.Device, len(d.Devices))
			for j := range d.Devices {
				d.Devices[j].DeepCopyInto(&cd.Devices[j])
			}
		}
		c.Drivers[i] = cd
	}
	return c
}
