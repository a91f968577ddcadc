package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// tombstones are the node's memory of its unprepares (issue #27 item 9). With two instances of
// the plugin (a rolling update with surge) the kubelet cancels a prepare asynchronously (an
// HTTP/2 stream reset) and sends the unprepare to the newest instance as soon as its own call
// returns; that unprepare may take the node lock before the other instance's prepare, find
// nothing to undo, and answer success, and the prepare, whose context is not cancelled yet,
// would then publish a record and a spec that nobody will ever unprepare. So every unprepare
// leaves a tombstone, the claim's UID and the time of the unprepare, and a prepare that began
// before the newest tombstone of its claim refuses to publish (TestUnprepareMeetsPrepare).
// A prepare that began after it is a new one, which the kubelet sent after the unprepare
// returned, and ignores it; it does not remove it, so that a prepare that fails after it
// cannot uncover an older one still in flight.
//
// A prepare begins when the driver receives it (Driver.PrepareResourceClaims); the time is the
// node's wall clock, shared by both instances. Tombstones live as files next to the checkpoint
// records (<checkpoint>/unprepared/<uid>), written under the node lock, atomically and, like the
// records, not fsynced; so they survive a restart of either instance as the records do, and a
// release that does not know them ignores them (pkg/checkpoint reads only <uid>.json). They are
// bounded: the garbage collection removes those older than tombstoneTTL, and a prepare that
// began longer ago than that is refused, since a tombstone it should honour may be gone.
type tombstones struct {
	n   *node
	dir string
}

// tombstoneTTL is how long a tombstone is kept: far longer than a prepare waits for the node
// lock (checkpoint.DefaultLockTimeout) and than the kubelet waits for a prepare.
const tombstoneTTL = 10 * time.Minute

// tombstone is a tombstone's file, a versioned type as the records are.
type tombstone struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	UID        string `json:"uid"`
	// UnpreparedAt is the wall-clock time of the unprepare, in nanoseconds since the epoch.
	UnpreparedAt int64 `json:"unpreparedAt"`
}

const (
	tombstoneAPIVersion = "tombstone.accel-dra.io/v1"
	tombstoneKind       = "UnpreparedClaim"
)

func newTombstones(n *node) *tombstones {
	return &tombstones{n: n, dir: filepath.Join(n.opts.State.Dir(), "unprepared")}
}

// bury records that the claim uid was unprepared now. Called with the node lock held.
func (t *tombstones) bury(_ *checkpoint.Locked, uid types.UID) error {
	data, err := json.Marshal(tombstone{APIVersion: tombstoneAPIVersion, Kind: tombstoneKind, UID: string(uid), UnpreparedAt: t.n.now().UnixNano()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(t.dir, ".tmp-"+string(uid)+"-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(t.dir, string(uid))); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}

// refuses returns why a prepare of the claim uid that began at start must not publish: the
// claim was unprepared after it began, or it began so long ago that such a tombstone may be
// gone. Called with the node lock held, before anything is published.
func (t *tombstones) refuses(uid types.UID, start time.Time) error {
	if age := t.n.now().Sub(start); age > tombstoneTTL {
		return fmt.Errorf("the prepare began %s ago, longer than this plugin remembers unprepares (%s); the kubelet gave up on it long ago", age.Round(time.Second), tombstoneTTL)
	}
	at, found, err := t.read(filepath.Join(t.dir, string(uid)))
	switch {
	case err != nil:
		// An unreadable tombstone cannot say when it was written: refuse, as for one written
		// now; the garbage collection removes it once it is older than tombstoneTTL by mtime.
		return fmt.Errorf("the claim's tombstone is unreadable (%w); refusing the prepare in case the claim was unprepared after it began", err)
	case found && at >= start.UnixNano():
		return fmt.Errorf("the claim was unprepared (at %s) after this prepare began (at %s); the kubelet has given up on this prepare",
			time.Unix(0, at).UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// read returns the time of the tombstone at path, if there is one.
func (t *tombstones) read(path string) (int64, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var ts tombstone
	if err := json.Unmarshal(data, &ts); err != nil {
		return 0, false, err
	}
	if ts.APIVersion != tombstoneAPIVersion || ts.Kind != tombstoneKind || ts.UID != filepath.Base(path) {
		return 0, false, fmt.Errorf("%s: not a tombstone of this claim (apiVersion %q, kind %q, uid %q)", path, ts.APIVersion, ts.Kind, ts.UID)
	}
	return ts.UnpreparedAt, true, nil
}

// sweep removes the tombstones older than tombstoneTTL (an unreadable one by its mtime) and
// returns their UIDs. Called with the node lock held (the garbage collection).
func (t *tombstones) sweep() ([]string, error) {
	entries, err := os.ReadDir(t.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cutoff := t.n.now().Add(-tombstoneTTL)
	var gone []string
	for _, e := range entries {
		path := filepath.Join(t.dir, e.Name())
		at, found, err := t.read(path)
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-"):
			// Left by a crash between write and rename.
			if info, ierr := e.Info(); ierr != nil || info.ModTime().After(cutoff) {
				continue
			}
		case err != nil:
			if info, ierr := e.Info(); ierr != nil || info.ModTime().After(cutoff) {
				continue
			}
		case !found || at > cutoff.UnixNano():
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return gone, err
		}
		gone = append(gone, e.Name())
	}
	return gone, nil
}
