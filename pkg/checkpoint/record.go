package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/accel-dra/accel-dra/pkg/device"
)

const (
	// APIVersion is the newest format this plugin reads and owns, and the one it writes;
	// APIVersionV1 is still read. Records of any other apiVersion are kept, not owned (see
	// "Versions" in the package comment).
	//
	// v2 added each device's identity (UUID, device nodes), admin access and the owner of a
	// PrepareStarted record. v1 records are still read: their new fields are empty, which the
	// driver takes as "identity not recorded" and fills in from the inventory on restore (a v1
	// record was written by an older plugin during this same boot, before any index could move).
	// The MIG instance ("mig"), shares ("shareID", "consumedCapacity") and sharing ("sharing")
	// were added to v2 later without a new apiVersion; v2 is what 83431c1 reads.
	APIVersion   = "checkpoint.accel-dra.io/v2"
	APIVersionV1 = "checkpoint.accel-dra.io/v1"
	RecordKind   = "PreparedClaim"

	apiVersionPrefix = "checkpoint.accel-dra.io/v"
	checksumPrefix   = "sha256:"
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

	// Foreign is set on a record this plugin keeps but does not own: intact, but in a format
	// it does not fully know. It is never part of a record (and so never written by Put).
	Foreign *Foreign `json:"-"`
}

// Foreign says why a record is kept but not owned: it is intact (its checksum matches its
// content) but written by a plugin whose format this one does not fully know, normally a newer
// one during a rolling update. Whatever its claim's known fields name is held; this plugin
// never rewrites or removes the record, nor prepares or unprepares its claim: the plugin that
// wrote it does (see "Versions" in the package comment).
type Foreign struct {
	// APIVersion and Kind are what the record says it is.
	APIVersion string
	Kind       string
	// Reason is what this plugin could not interpret.
	Reason string
	// Opaque is set when not even the fields of this plugin's format could be read (another
	// kind, a known field of another type): the claim has only its UID, from the file name, and
	// what it holds is unknown, so every device on the node counts as held while it exists.
	Opaque bool
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
	if c.Foreign != nil {
		return nil, fmt.Errorf("claim %s: its record is in a format this plugin does not fully know (apiVersion %s: %s); rewriting it would lose what this plugin cannot read", c.UID, c.Foreign.APIVersion, c.Foreign.Reason)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	claimJSON, sum, err := checksum(bootID, c)
	if err != nil {
		return nil, fmt.Errorf("encoding claim %s: %w", c.UID, err)
	}
	out, err := json.Marshal(record{
		APIVersion: apiVersionOf(c),
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

// apiVersionOf is the apiVersion a record of c is written with: the oldest one that has every
// field c sets, and v2 at least (package comment). Every field this plugin writes is a v2
// field; a new field comes with a new apiVersion, returned here for the claims that set it
// (TestEveryFieldHasAVersion fails until it is).
func apiVersionOf(*Claim) string { return APIVersion }

// errChecksum is a record whose checksum does not match its content: damage.
var errChecksum = errors.New("checksum mismatch")

// decodeRecord parses and verifies a record file. An error means the record is damaged and must
// not be trusted. An intact record that this plugin cannot fully interpret is no error: it comes
// back with Foreign set, and with the fields of this plugin's format that could be read.
func decodeRecord(data []byte) (bootID string, c Claim, err error) {
	// The envelope, loosely: fields a later version may add to it are no damage.
	var env record
	if err := json.Unmarshal(data, &env); err != nil {
		return "", Claim{}, fmt.Errorf("not a checkpoint record: %w", err)
	}
	bootID, c, err = decodeOwned(data, &env)
	if err == nil {
		return bootID, c, nil
	}
	if ierr := env.intact(); ierr != nil {
		if errors.Is(err, errChecksum) {
			return "", Claim{}, err
		}
		return "", Claim{}, fmt.Errorf("%w, and the record is not intact: %w", err, ierr)
	}
	return env.BootID, foreignClaim(&env, err), nil
}

// decodeOwned decodes a record in a format this plugin knows, strictly: an unknown field in it is
// something this plugin would lose by rewriting the record.
func decodeOwned(data []byte, env *record) (bootID string, c Claim, err error) {
	if env.APIVersion != APIVersion && env.APIVersion != APIVersionV1 {
		return "", Claim{}, fmt.Errorf("unsupported apiVersion %q%s, want %q (or %q)", env.APIVersion, newer(env.APIVersion), APIVersion, APIVersionV1)
	}
	if env.Kind != RecordKind {
		return "", Claim{}, fmt.Errorf("unsupported kind %q, want %q", env.Kind, RecordKind)
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
	// The claim as this plugin encodes it, or as the file has it: a writer need not order or
	// escape its fields as encoding/json of these types does.
	if sum != rec.Checksum && rawChecksum(rec.BootID, rec.Claim) != rec.Checksum {
		return "", Claim{}, fmt.Errorf("%w: record says %s, content is %s", errChecksum, rec.Checksum, sum)
	}
	if err := c.validate(); err != nil {
		return "", Claim{}, err
	}
	if env.APIVersion == APIVersionV1 && c.hasV2Fields() {
		return "", Claim{}, fmt.Errorf("apiVersion %s record has fields of %s", APIVersionV1, APIVersion)
	}
	return rec.BootID, c, nil
}

// newer says so if apiVersion is a later version of this format.
func newer(apiVersion string) string {
	n, err := strconv.Atoi(strings.TrimPrefix(apiVersion, apiVersionPrefix))
	if !strings.HasPrefix(apiVersion, apiVersionPrefix) || err != nil || n <= 2 {
		return ""
	}
	return " (newer than this plugin)"
}

// intact reports whether the record is whole as its writer wrote it, whatever its version:
// its checksum covers the claim's bytes as written (compacted), which needs no knowledge of
// what the claim says.
func (r *record) intact() error {
	if !strings.HasPrefix(r.Checksum, checksumPrefix) {
		return fmt.Errorf("checksum %q is not %s<hex>", r.Checksum, checksumPrefix)
	}
	if len(r.Claim) == 0 || r.Claim[0] != '{' {
		return errors.New("its claim is not a JSON object")
	}
	if sum := rawChecksum(r.BootID, r.Claim); sum != r.Checksum {
		return fmt.Errorf("%w: record says %s, content is %s", errChecksum, r.Checksum, sum)
	}
	return nil
}

// rawChecksum is the checksum of a claim as written. For a claim encoding/json wrote (every
// writer so far) it equals checksum's, which encodes the same wrapper around the same bytes.
func rawChecksum(bootID string, claim json.RawMessage) string {
	body, err := json.Marshal(struct {
		BootID string          `json:"bootID"`
		Claim  json.RawMessage `json:"claim"`
	}{bootID, claim})
	if err != nil {
		return "" // not valid JSON: matches no checksum
	}
	h := sha256.Sum256(body)
	return checksumPrefix + hex.EncodeToString(h[:])
}

// foreignClaim is what this plugin can read of an intact record it does not own: the fields of
// its own format, leniently, which every later format keeps with their meaning.
func foreignClaim(env *record, reason error) Claim {
	f := &Foreign{APIVersion: env.APIVersion, Kind: env.Kind, Reason: reason.Error()}
	var c Claim
	err := json.Unmarshal(env.Claim, &c)
	switch {
	case env.Kind != RecordKind:
		f.Opaque = true
	case err != nil:
		f.Opaque, f.Reason = true, f.Reason+"; reading its known fields: "+err.Error()
	case validateUID(c.UID) != nil:
		f.Opaque, f.Reason = true, f.Reason+"; "+validateUID(c.UID).Error()
	}
	if f.Opaque {
		return Claim{Foreign: f}
	}
	c.Foreign = f
	return c
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
