package device

// Topology is where a whole GPU sits in its node's NVLink graph and its NVLink fabric (or an
// Ascend NPU in its HCCS group), as
// package topology derives it from what the backend read (docs/device-attributes.md, "NVLink
// and fabric"). Every ID names a set of GPUs of one node and is derived from their sorted PCI
// bus IDs, so it is the same after a restart and on every node of the same hardware; the
// fabric clique is the fabric manager's and is shared by the GPUs of several nodes. A field
// that does not apply is empty: its attribute is omitted, never guessed.
type Topology struct {
	// Island is the GPU's NVLink island: the connected component of the node's NVLink graph
	// (direct links and links through one NVSwitch fabric, confirmed by P2P status). Empty
	// when the GPU has no NVLink peer on the node.
	Island string `json:"island,omitempty"`
	// IslandFullMesh says whether every two GPUs of the island are NVLink peers.
	IslandFullMesh bool `json:"islandFullMesh,omitempty"`
	// Group2, Group4 and Group8 name the GPU's aligned group of that size: the island's GPUs
	// in bus ID order cut into consecutive blocks of the size, where the GPU's block is whole
	// and every two GPUs of it are peers. Empty where the GPU's block is not such a group.
	Group2 string `json:"group2,omitempty"`
	Group4 string `json:"group4,omitempty"`
	Group8 string `json:"group8,omitempty"`
	// Cliques name every maximal set of pairwise NVLink peers the GPU belongs to, sorted.
	Cliques []string `json:"cliques,omitempty"`
	// Links is the number of the GPU's active NVLink links; 0 means none, and then every
	// other field is empty.
	Links int `json:"links,omitempty"`
	// Version is the NVLink version of the GPU's active links, "4.0"; empty if unknown.
	Version string `json:"version,omitempty"`
	// FabricClique is the GPU's NVLink fabric clique, "<clusterUUID>.<cliqueID>" (what NVIDIA
	// publishes as the node label nvidia.com/gpu.clique), set only where the GPU's fabric
	// registration completed successfully.
	FabricClique string `json:"fabricClique,omitempty"`
	// HCCS is an Ascend NPU's HCCS group, "ring-0" (Ascend 910: two rings of four) or
	// "mesh-0" (Ascend 910B: one mesh per eight-NPU module); empty where the backend cannot
	// tell. NPUs have none of the NVLink fields.
	HCCS string `json:"hccs,omitempty"`
}
