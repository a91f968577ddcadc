package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
)

// A releasedReader is the record decoder of a plugin released before this one, kept so that
// tests can say what an old pod does with the records a new one writes (a rolling update runs
// both on one node). Every release from bbd9ab1 to 83431c1 ran the same decodeRecord: the
// apiVersion among those it knows, the record and then the claim decoded strictly into its own
// types, the checksum of the claim as those types re-encode it, then UID, state and owner
// checked; any error moved the record to corrupt/. The releases differ only in the apiVersions
// they accept and in their types, which are copied below field for field from
// `git show <commit>:pkg/checkpoint/record.go` (pkg/device.Node has not changed since bbd9ab1).
// testdata/README.md says how the same fixtures were checked against the real old code.
type releasedReader struct {
	commit   string
	versions []string
	// claim returns a new claim of the release's type for a record of apiVersion v.
	claim func(v string) any
}

var releasedReaders = []releasedReader{
	{commit: "bbd9ab1", versions: []string{APIVersionV1}, claim: func(string) any { return &claimV1{} }},
	{commit: "94642e0", versions: []string{APIVersionV1, APIVersion}, claim: v1Or(func() any { return &claim94642e0{} })},
	{commit: "e47d56b", versions: []string{APIVersionV1, APIVersion}, claim: v1Or(func() any { return &claimE47d56b{} })},
	{commit: "83431c1", versions: []string{APIVersionV1, APIVersion}, claim: v1Or(func() any { return &claim83431c1{} })},
}

// v1Or: a v2 release refuses a v1 record with fields of v2 (hasV2Fields), which is what decoding
// it strictly into the v1 type refuses, for records their writers wrote (empty fields omitted).
func v1Or(v2 func() any) func(string) any {
	return func(v string) any {
		if v == APIVersionV1 {
			return &claimV1{}
		}
		return v2()
	}
}

// decode is what the release's Load did with data: nil means it read the record, an error
// means it moved the record to corrupt/ for that reason.
func (r releasedReader) decode(data []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return fmt.Errorf("not a checkpoint record: %w", err)
	}
	if !slices.Contains(r.versions, head.APIVersion) {
		return fmt.Errorf("unsupported apiVersion %q", head.APIVersion)
	}
	if head.Kind != RecordKind {
		return fmt.Errorf("unsupported kind %q", head.Kind)
	}
	var rec record
	if err := strictUnmarshal(data, &rec); err != nil {
		return fmt.Errorf("decoding record: %w", err)
	}
	c := r.claim(head.APIVersion)
	if err := strictUnmarshal(rec.Claim, c); err != nil {
		return fmt.Errorf("decoding claim: %w", err)
	}
	body, err := json.Marshal(struct {
		BootID string `json:"bootID"`
		Claim  any    `json:"claim"`
	}{rec.BootID, c})
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if checksumPrefix+hex.EncodeToString(sum[:]) != rec.Checksum {
		return errors.New("checksum mismatch")
	}
	var id struct {
		UID   string `json:"uid"`
		State State  `json:"state"`
		Owner string `json:"owner"`
	}
	if err := json.Unmarshal(rec.Claim, &id); err != nil {
		return err
	}
	if err := validateUID(id.UID); err != nil {
		return err
	}
	if id.State != StatePrepareStarted && id.State != StatePrepareCompleted {
		return fmt.Errorf("unknown state %q", id.State)
	}
	if id.Owner != "" {
		return validateUID(id.Owner)
	}
	return nil
}

// Each release's types, as it had them: a later release's are an earlier one's plus what it
// added, in the same order (embedding keeps it, which re-encoding for the checksum needs).

type claimOf[D any] struct {
	UID       string   `json:"uid"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	State     State    `json:"state"`
	Devices   []D      `json:"devices"`
	Env       []string `json:"env"`
}

type claimV1 = claimOf[deviceV1]

type deviceV1 struct {
	Request      string   `json:"request"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

type releasedNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath,omitempty"`
	Type     string `json:"type,omitempty"`
	Major    int64  `json:"major,omitempty"`
	Minor    int64  `json:"minor,omitempty"`
}

// 94642e0: v2 as first released, with identities, admin access and the owner.
type claim94642e0 struct {
	claimOf[device94642e0]
	Owner string `json:"owner,omitempty"`
}

type device94642e0 struct {
	deviceV1
	UUID        string         `json:"uuid,omitempty"`
	Nodes       []releasedNode `json:"nodes,omitempty"`
	AdminAccess bool           `json:"adminAccess,omitempty"`
}

// e47d56b (merge of dynamic MIG): v2 with "mig", no new apiVersion.
type claimE47d56b struct {
	claimOf[deviceE47d56b]
	Owner string `json:"owner,omitempty"`
}

type deviceE47d56b struct {
	device94642e0
	MIG *struct {
		ParentUUID string `json:"parentUUID"`
		Profile    string `json:"profile"`
		ProfileID  int    `json:"profileID"`
		Start      int    `json:"start"`
		Size       int    `json:"size"`
		GI         *int   `json:"gi,omitempty"`
		CI         *int   `json:"ci,omitempty"`
	} `json:"mig,omitempty"`
}

// 83431c1 (since 5bdff57, the merge of sharing): v2 with "sharing", "shareID" and
// "consumedCapacity" too, still no new apiVersion.
type claim83431c1 struct {
	claimOf[device83431c1]
	Owner   string `json:"owner,omitempty"`
	Sharing *struct {
		Strategy               string           `json:"strategy"`
		Interval               string           `json:"interval,omitempty"`
		ActiveThreadPercentage int32            `json:"activeThreadPercentage,omitempty"`
		PinnedMemoryMiB        map[string]int64 `json:"pinnedMemoryMiB,omitempty"`
	} `json:"sharing,omitempty"`
}

type device83431c1 struct {
	deviceE47d56b
	ShareID          string                       `json:"shareID,omitempty"`
	ConsumedCapacity map[string]resource.Quantity `json:"consumedCapacity,omitempty"`
}
