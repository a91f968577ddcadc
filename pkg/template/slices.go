package template

import (
	resourceapi "k8s.io/api/resource/v1"
)

// ResourceSlices returns the ResourceSlices of a template node named nodeName; see
// apitemplate.Template.ResourceSlices, which this is.
func (t *Template) ResourceSlices(nodeName string) ([]*resourceapi.ResourceSlice, error) {
	return t.api().ResourceSlices(nodeName)
}

// ResourceSlicesVerbatim is ResourceSlices with the identity attributes' placeholders kept as
// they are; see apitemplate.Template.ResourceSlicesVerbatim.
func (t *Template) ResourceSlicesVerbatim(nodeName string) ([]*resourceapi.ResourceSlice, error) {
	return t.api().ResourceSlicesVerbatim(nodeName)
}
