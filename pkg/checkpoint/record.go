package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/accel-dra/accel-dra/pkg/device"
)

const (
	// APIVersion and RecordKind identify the on-disk format. A reader refuses any other
	// apiVersion rather than guess: a record it cannot interpret is moved aside, never trusted.
	//
	// v2 added each device's identity (UUID, device nodes), admin access and the owner of a
	// PrepareStarted record. v1 records are still read: their new fields are empty, which the
	// driver takes as "identity not recorded" and fills in from the inventory on restore (a v1
	// record was written by an older plugin during this same boot, before any index could move).
	APIVersion   = "checkpoint.accel-dra.io/v2"
	APIVersionV1 = "checkpoint.accel-dra.io/v1"
	RecordKind   = "PreparedClaim"

	checksumPrefix = "sha256:"
)

// State is how far a claim's preparation got. A claim is recorded as PrepareStarted before any
// side effect (CDI spec) is made, so that after a crash the plugin knows what it may have to
// undo; it becomes PrepareCompleted once everything the kubelet was told about exists.
type State string

const (
	StatePrepareStarted   State = "PrepareStarted"
	StatePrepareCompleted State = "PrepareCompleted"
)

// Claim is what the plugin remembers about one prepared ResourceClaim.
type Claim struct {
	UID       string           `json:"uid"`
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	State     State            `json:"state"`
	Devices   []PreparedDevice `json:"devices"`
	// Env is the environment the claim's CDI spec was given, so that a spec lost from the CDI
	// directory can be re-created exactly without re-reading the claim's configuration.
	Env []string `json:"env"`
	// Owner is the plugin instance that wrote a PrepareStarted record. Another instance (a
	// rolling update runs two) leaves the record alone while that owner is alive, and rolls it
	// back once it is not. New fields are omitempty so that a v1 claim encodes, and therefore
	// checksums, exactly as v1 wrote it.
	Owner string `json:"owner,omitempty"`
	// Sharing is what the claim's GpuConfig.sharing set on its GPUs. A GPU-wide setting (a
	// time-slice) is put back when the last claim needing it is unprepared; the record stays
	// until that is done, so that a crash in between leaves the work to whoever removes the
	// record next.
	Sharing *Sharing `json:"sharing,omitempty"`
}

// Sharing is the sharing strategy a claim's GPUs were prepared with.
type Sharing struct {
	Strategy string `json:"strategy"`
	// Interval is the time-slice interval of the TimeSlicing strategy.
	Interval string `json:"interval,omitempty"`
	// MPS: the daemon's default active thread percentage (0: none) and pinned memory limit
	// per GPU UUID, in MiB, so that a daemon that has to be started again gets them again.
	ActiveThreadPercentage int32            `json:"activeThreadPercentage,omitempty"`
	PinnedMemoryMiB        map[string]int64 `json:"pinnedMemoryMiB,omitempty"`
}

// PreparedDevice is one allocated device of a claim and the CDI IDs handed to the kubelet for it.
type PreparedDevice struct {
	Request      string   `json:"request"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
	// UUID and Nodes are the identity of the device the claim got. A device name that maps to
	// another UUID or other nodes after a restart is a different device, and the claim is
	// refused rather than pointed at it.
	UUID  string        `json:"uuid,omitempty"`
	Nodes []device.Node `json:"nodes,omitempty"`
	// AdminAccess devices are shared with whoever else holds them and hold nothing themselves.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// MIG is set for a dynamic-MIG device: the MIG instance prepare creates for it, recorded
	// before it is created (intent) and again as each part of it comes into being, so that a
	// restart after a crash knows what it may have to destroy.
	MIG *MIGRecord `json:"mig,omitempty"`
	// ShareID is set for a share of a device that allows multiple allocations (consumable
	// capacity): the device is held by every claim with a share of it, and by none exclusively.
	// ConsumedCapacity is what the share got, as the scheduler allocated it.
	ShareID          string                       `json:"shareID,omitempty"`
	ConsumedCapacity map[string]resource.Quantity `json:"consumedCapacity,omitempty"`
}

// MIGRecord is a MIG instance a claim's preparation creates. Profile and placement are the
// intent, written before anything is created; GI is written right after the GPU instance is
// created, CI (with the device's UUID and nodes in PreparedDevice) right after the compute
// instance is.
type MIGRecord struct {
	ParentUUID string `json:"parentUUID"`
	Profile    string `json:"profile"`
	// ProfileID is NVML's GPU-instance profile index.
	ProfileID int  `json:"profileID"`
	Start     int  `json:"start"`
	Size      int  `json:"size"`
	GI        *int `json:"gi,omitempty"`
	CI        *int `json:"ci,omitempty"`
}

// record is the file format. Claim stays raw while decoding so that the checksum can be checked
// against the claim's canonical encoding, independent of how the file happens to be formatted.
type record struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	BootID     string          `json:"bootID"`
	Checksum   string          `json:"checksum"`
	Claim      json.RawMessage `json:"claim"`
}

// checksummed is what the checksum covers: the claim and the boot it belongs to, so that a record
// cannot be moved to another boot by editing bootID alone.
type checksummed struct {
	BootID string `json:"bootID"`
	Claim  *Claim `json:"claim"`
}

// validate checks what the rest of the plugin relies on: a UID usable as a file name and a
// known state.
func (c *Claim) validate() error {
	if err := validateUID(c.UID); err != nil {
		return err
	}
	switch c.State {
	case StatePrepareStarted, StatePrepareCompleted:
	default:
		return fmt.Errorf("claim %s: unknown state %q", c.UID, c.State)
	}
	if c.Owner != "" {
		// The owner names a file under instances/.
		if err := validateUID(c.Owner); err != nil {
			return fmt.Errorf("claim %s: owner: %w", c.UID, err)
		}
	}
	return nil
}

func (c *Claim) hasV2Fields() bool {
	if c.Owner != "" || c.Sharing != nil {
		return true
	}
	for _, d := range c.Devices {
		if d.UUID != "" || len(d.Nodes) > 0 || d.AdminAccess || d.MIG != nil || d.ShareID != "" || len(d.ConsumedCapacity) > 0 {
			return true
		}
	}
	return false
}

// validateUID accepts what Kubernetes generates (UUIDs) and anything else that is a plain,
// portable file name, because the UID becomes `<uid>.json`.
func validateUID(uid string) error {
	if uid == "" {
		return errors.New("empty claim UID")
	}
	if len(uid) > 128 {
		return fmt.Errorf("claim UID %.20q...: longer than 128 characters", uid)
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.'):
		default:
			return fmt.Errorf("claim UID %q: character %q not allowed", uid, c)
		}
	}
	return nil
}

func checksum(bootID string, c *Claim) (canonicalClaim []byte, sum string, err error) {
	canonicalClaim, err = json.Marshal(c)
	if err != nil {
		return nil, "", err
	}
	// Marshalling the wrapper re-encodes the claim; it is small, and keeping one definition of
	// "canonical" (encoding/json of the Go types) beats hand-splicing bytes.
	body, err := json.Marshal(checksummed{BootID: bootID, Claim: c})
	if err != nil {
		return nil, "", err
	}
	h := sha256.Sum256(body)
	return canonicalClaim, checksumPrefix + hex.EncodeToString(h[:]), nil
}

// encodeRecord renders a claim as the bytes of its record file.
func encodeRecord(bootID string, c *Claim) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	claimJSON, sum, err := checksum(bootID, c)
	if err != nil {
		return nil, fmt.Errorf("encoding claim %s: %w", c.UID, err)
	}
	out, err := json.Marshal(record{
		APIVersion: APIVersion,
		Kind:       RecordKind,
		BootID:     bootID,
		Checksum:   sum,
		Claim:      claimJSON,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding claim %s: %w", c.UID, err)
	}
	return append(out, '\n'), nil
}

// decodeRecord parses and verifies a record file. Any error means the record must not be
// trusted.
func decodeRecord(data []byte) (bootID string, c Claim, err error) {
	// Look at the version first, loosely, so that a record from a newer plugin is reported as
	// such rather than as "unknown field".
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return "", Claim{}, fmt.Errorf("not a checkpoint record: %w", err)
	}
	if head.APIVersion != APIVersion && head.APIVersion != APIVersionV1 {
		return "", Claim{}, fmt.Errorf("unsupported apiVersion %q, want %q (or %q)", head.APIVersion, APIVersion, APIVersionV1)
	}
	if head.Kind != RecordKind {
		return "", Claim{}, fmt.Errorf("unsupported kind %q, want %q", head.Kind, RecordKind)
	}

	var rec record
	if err := strictUnmarshal(data, &rec); err != nil {
		return "", Claim{}, fmt.Errorf("decoding record: %w", err)
	}
	if len(rec.Claim) == 0 || bytes.Equal(rec.Claim, []byte("null")) {
		return "", Claim{}, errors.New("record has no claim")
	}
	if err := strictUnmarshal(rec.Claim, &c); err != nil {
		return "", Claim{}, fmt.Errorf("decoding claim: %w", err)
	}
	if !strings.HasPrefix(rec.Checksum, checksumPrefix) {
		return "", Claim{}, fmt.Errorf("checksum %q is not %s<hex>", rec.Checksum, checksumPrefix)
	}
	_, sum, err := checksum(rec.BootID, &c)
	if err != nil {
		return "", Claim{}, err
	}
	if sum != rec.Checksum {
		return "", Claim{}, fmt.Errorf("checksum mismatch: record says %s, content is %s", rec.Checksum, sum)
	}
	if err := c.validate(); err != nil {
		return "", Claim{}, err
	}
	if head.APIVersion == APIVersionV1 && c.hasV2Fields() {
		return "", Claim{}, fmt.Errorf("apiVersion %s record has fields of %s", APIVersionV1, APIVersion)
	}
	return rec.BootID, c, nil
}

// strictUnmarshal rejects unknown fields and trailing data: a record is written in one piece by
// one writer, so anything else is damage.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON object")
	}
	return nil
}
