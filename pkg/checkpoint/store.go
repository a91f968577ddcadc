// Package checkpoint is the plugin's crash-safe memory of prepared claims, and the one place
// that decides who holds a device on the node.
//
// Each claim is one record file, `<dir>/<claimUID>.json`, rather than one file holding every
// claim: rewriting a shared file makes every prepare cost O(prepared claims) in encoding and
// I/O, while one file per claim keeps Put and Delete at one small write whether ten or a
// thousand claims are prepared. Only Load, at start-up, looks at the whole directory.
//
// A record carries the boot ID and a checksum. A damaged record (unreadable, truncated, bad
// checksum) is moved aside into `<dir>/corrupt/` and reported; it never fails Load, because a
// plugin that refuses to start over one bad file crash-loops and then cannot unprepare anything
// at all. An intact record this plugin cannot fully interpret is not damage: it is kept (see
// Versions).
//
// Several plugin processes may share the directory (a rolling update runs the old and the new
// pod side by side). Lock takes a node-wide lock, flock(2) on `<dir>/lock`, that every process
// honours; records are written and removed only under it. The lock file also holds a
// generation counter that each writer bumps, so a process can keep an in-memory index of the
// records and learn cheaply, under the lock, whether another process changed the directory
// since it last looked, and which records (Locked.Changes) it changed. Each process also holds a flock on `<dir>/instances/<id>.lock` for its
// lifetime, which tells the others whether the owner of a half-done record is still alive; the
// kernel drops it when the process dies, kill -9 included.
//
// Nothing is fsynced; see docs/node-plugin.md ("Durability"). A record must outlive a crash of
// the process, which the page cache gives, and nothing of a boot must outlive a kernel crash,
// because the boot ID makes the next boot discard every record anyway.
//
// # Versions
//
// Two releases of the plugin share the directory during a rolling update, and the kubelet may
// send either of them any claim, so each must live with the other's records. A plugin that took
// a newer one's records for damage and moved them aside would hand their devices out again and
// sweep their MIG instances. These rules hold for this plugin and every later one:
//
//   - The envelope is fixed: a JSON object with apiVersion (checkpoint.accel-dra.io/vN), kind
//     (PreparedClaim), bootID, checksum and claim, and the record of a claim is <claim UID>.json.
//     The checksum is "sha256:" and the hex SHA-256 of the JSON object {"bootID":…,"claim":…}
//     with the claim's bytes as written, compacted. Every reader can thus tell an intact record
//     from a damaged one without understanding the claim. (The writers of v1 and v2 met this
//     already: their checksum is of the same bytes.)
//   - Every new field comes with a new apiVersion, and a field keeps its meaning once written;
//     a new field is optional, and its absence means what it meant before. testdata/ keeps
//     records of every released writer, and TestEveryFieldHasAVersion fails for a field without
//     an apiVersion.
//   - A record is written with the oldest apiVersion that has every field it sets, and no older
//     than v2. A record that uses nothing new is one that older plugins read and own in full: a
//     rolling update then restricts them only for the claims that use what they do not have.
//   - A later version writes, in the fields of v2, everything a v2 reader needs to hold what the
//     claim holds: each device by name and UUID, admin access, a share's shareID, the MIG
//     instance in mig, the sharing strategy in sharing. A record that holds something these
//     fields cannot name is not of kind PreparedClaim, so that older readers hold it as opaque.
//   - A record of another boot holds nothing, since the containers it served died with that
//     boot, and whichever plugin loads it deletes it, as before.
//
// A reader moves aside only damage: a file that is not such a JSON object, a checksum that does
// not match, a claim stored under another claim's name. A record it reads in full is its own. An
// intact record it cannot fully interpret (a newer apiVersion, a field or kind it does not know)
// is kept untouched and returned with Claim.Foreign set and with the fields of this plugin's
// format read from it leniently: they name what it holds. If even those cannot be read, the record
// is opaque, and what it holds is unknown: every device on the node counts as held while it
// exists. Such records are never rewritten (Put refuses them) or removed by this plugin, and
// their claims are left to the plugin that wrote them.
//
// This plugin reads v1 and v2. v2 is the format as 83431c1 reads it: the MIG instance, shares and
// sharing were added to it after it was first released, without a new apiVersion, so that the
// plugins of 94642e0 and e47d56b move records that carry them aside (docs/node-plugin.md,
// "Checkpoint versions"). Releases before this one do not hold what they cannot read, whatever
// the version: they move it aside.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

const (
	recordExt  = ".json"
	tempPrefix = "."
	tempSuffix = ".tmp"
	// CorruptDir is the sub-directory records that failed to load are moved to, for a human to
	// look at. Nothing reads it back.
	CorruptDir = "corrupt"
	// LockFile is the node-wide lock shared by every plugin process using the directory.
	LockFile = "lock"
	// InstancesDir holds one lock file per live plugin process.
	InstancesDir = "instances"
)

// Store reads and writes claim records in one directory.
//
// Put and Delete of different claims may run concurrently. Load excludes them: it removes
// temporary files, and one of those could belong to a Put in flight.
type Store struct {
	dir    string
	bootID string
	// mu is held shared by Put/Delete and exclusively by Load.
	mu sync.RWMutex

	// lockSem hands the node lock to one goroutine of this process at a time (flock alone
	// would let every goroutine sharing lockFile in); a channel rather than a mutex, so that a
	// waiter can give up (LockContext).
	lockSem     chan struct{}
	lockTimeout atomic.Int64 // nanoseconds; see SetLockTimeout
	lockFile    *os.File
	// seenGen is the generation this process last saw or wrote, guarded by the node lock.
	seenGen uint64
}

// Corrupt is a record that could not be trusted and was moved aside. As an error it is what
// Locked.Get returns for such a record.
type Corrupt struct {
	// Path is where the record was.
	Path string
	// MovedTo is where it is now; empty if moving it failed too (Err then says why).
	MovedTo string
	Err     error
}

func (c *Corrupt) Error() string { return c.Err.Error() }
func (c *Corrupt) Unwrap() error { return c.Err }

// LoadResult is what Load found.
type LoadResult struct {
	// Claims are the records of this boot, sorted by UID, those this plugin does not own
	// (Claim.Foreign) included: they hold what they name.
	Claims []Claim
	// Stale are valid records written during another boot, sorted by UID. Their containers and
	// CDI specs died with that boot; the caller deletes them.
	Stale []Claim
	// Corrupt are the records moved aside.
	Corrupt []Corrupt
}

// Open returns a store for dir, creating it (mode 0700: it names every claim on the node) if
// needed. bootID is the current boot's ID, see package bootid.
func Open(dir, bootID string) (*Store, error) {
	if bootID == "" {
		return nil, errors.New("opening checkpoint: empty boot ID")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening checkpoint: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint lock: %w", err)
	}
	// No generation is "seen" yet, so the first Lock reports Changed and an index gets built.
	s := &Store{dir: dir, bootID: bootID, lockFile: f, seenGen: ^uint64(0), lockSem: make(chan struct{}, 1)}
	s.SetLockTimeout(DefaultLockTimeout)
	return s, nil
}

// Close releases the lock file. A Store is not usable afterwards.
func (s *Store) Close() error { return s.lockFile.Close() }

// Dir is the directory the store keeps its records in.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(uid string) string { return filepath.Join(s.dir, uid+recordExt) }

// Put records c, replacing any record of the same UID. When it fails the previous record, if
// any, is intact. The record survives a crash of the process once Put returns (see the
// package comment for why that is all it needs to survive). Callers that share the directory
// with other processes use Locked.Put instead.
func (s *Store) Put(c Claim) error {
	data, err := encodeRecord(s.bootID, &c)
	if err != nil {
		return fmt.Errorf("checkpointing claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writeAtomic(c.UID, data); err != nil {
		return fmt.Errorf("checkpointing claim %s/%s (%s): %w", c.Namespace, c.Name, c.UID, err)
	}
	return nil
}

// writeAtomic writes a temp file in the same directory and renames it over the record, so a
// reader (or a process that dies half-way) sees the old record or the new one, never a mix.
func (s *Store) writeAtomic(uid string, data []byte) error {
	tmp, err := s.writeTemp(uid, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path(uid)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// writeTemp writes data to a new temporary file next to uid's record and returns its path.
func (s *Store) writeTemp(uid string, data []byte) (tmp string, err error) {
	f, err := os.CreateTemp(s.dir, tempPrefix+uid+recordExt+".*"+tempSuffix)
	if err != nil {
		return "", err
	}
	tmp = f.Name()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return "", err
	}
	if err = f.Close(); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// Staged is a record encoded and written to a temporary file ahead of time, so that publishing
// it under the node lock (Locked.PutStaged) costs one rename rather than an encode, a file
// creation and a write: every prepare on the node queues behind the lock, so what can be done
// before taking it is done before.
type Staged struct {
	s     *Store
	claim Claim
	data  []byte
	tmp   string // "" once used or discarded
}

// Stage encodes c and writes it to a temporary file, which no reader takes for a record. The
// caller publishes it with Locked.PutStaged or drops it with Discard.
func (s *Store) Stage(c Claim) (*Staged, error) {
	data, err := encodeRecord(s.bootID, &c)
	if err != nil {
		return nil, fmt.Errorf("checkpointing claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	tmp, err := s.writeTemp(c.UID, data)
	if err != nil {
		return nil, fmt.Errorf("checkpointing claim %s/%s (%s): %w", c.Namespace, c.Name, c.UID, err)
	}
	return &Staged{s: s, claim: c, data: data, tmp: tmp}, nil
}

// Claim is the record staged.
func (st *Staged) Claim() Claim { return st.claim }

// Discard removes the temporary file of a record that is not going to be published. It is a
// no-op after PutStaged or a previous Discard.
func (st *Staged) Discard() {
	if st == nil || st.tmp == "" {
		return
	}
	_ = os.Remove(st.tmp)
	st.tmp = ""
}

// Delete removes the record of uid. Deleting a record that does not exist is not an error:
// unprepare is retried by the kubelet and must be idempotent.
func (s *Store) Delete(uid string) error {
	if err := validateUID(uid); err != nil {
		return fmt.Errorf("deleting checkpoint: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	err := os.Remove(s.path(uid))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting checkpoint of claim %s: %w", uid, err)
	}
	return nil
}

// Load reads every record. Only a failure to read the directory itself is an error; each bad
// record is moved aside and reported in the result instead.
func (s *Store) Load(ctx context.Context) (*LoadResult, error) { return s.load(ctx, true) }

// load reads every record; removeTemps says whether temporary files are garbage (at start-up)
// or may be records another process has staged and is about to publish (Locked.Reload).
func (s *Store) load(ctx context.Context, removeTemps bool) (*LoadResult, error) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()

	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint: %w", err)
	}
	res := &LoadResult{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("loading checkpoint: %w", err)
		}
		name := e.Name()
		path := filepath.Join(s.dir, name)
		switch {
		case (name == CorruptDir || name == InstancesDir) && e.IsDir():
			continue
		case strings.HasPrefix(name, tempPrefix) && strings.HasSuffix(name, tempSuffix):
			if !removeTemps {
				continue
			}
			// An interrupted Put: the rename never happened, so the previous record (if any)
			// is still the truth and the temp file is garbage.
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				logger.Error(err, "Could not remove leftover temporary checkpoint file", "path", path)
			} else {
				logger.V(2).Info("Removed leftover temporary checkpoint file", "path", path)
			}
			continue
		case !strings.HasSuffix(name, recordExt):
			// Not ours; leave it alone.
			continue
		}

		bootID, c, err := s.readRecord(path, strings.TrimSuffix(name, recordExt))
		if err != nil {
			bad := s.moveAside(path, err)
			logger.Error(bad.Err, "Moved corrupt checkpoint record aside", "path", bad.Path, "movedTo", bad.MovedTo)
			res.Corrupt = append(res.Corrupt, bad)
			continue
		}
		if bootID != s.bootID {
			res.Stale = append(res.Stale, c)
			continue
		}
		if c.Foreign != nil {
			logger.V(2).Info("Keeping a checkpoint record this plugin cannot fully read", "path", path, "apiVersion", c.Foreign.APIVersion, "reason", c.Foreign.Reason)
		}
		res.Claims = append(res.Claims, c)
	}
	sortClaims(res.Claims)
	sortClaims(res.Stale)
	return res, nil
}

func (s *Store) readRecord(path, uid string) (string, Claim, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", Claim{}, err
	}
	bootID, c, err := decodeRecord(data)
	if err != nil {
		return "", Claim{}, err
	}
	if c.Foreign != nil && c.Foreign.Opaque {
		// Nothing in it could be read, not even its UID: the name is all there is.
		if err := validateUID(uid); err != nil {
			return "", Claim{}, fmt.Errorf("record name: %w", err)
		}
		c.UID = uid
	}
	// A record under another claim's name would make Delete(uid) miss it forever.
	if c.UID != uid {
		return "", Claim{}, fmt.Errorf("record of claim %s stored under name %s", c.UID, uid)
	}
	return bootID, c, nil
}

// moveAside renames a bad record to corrupt/<name>.<unix-nanos>. The timestamp keeps a record
// that goes bad twice from overwriting the first copy.
func (s *Store) moveAside(path string, cause error) Corrupt {
	bad := Corrupt{Path: path, Err: fmt.Errorf("checkpoint record %s: %w", path, cause)}
	cdir := filepath.Join(s.dir, CorruptDir)
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		bad.Err = errors.Join(bad.Err, fmt.Errorf("moving it aside: %w", err))
		return bad
	}
	dst := filepath.Join(cdir, filepath.Base(path)+"."+strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := os.Rename(path, dst); err != nil {
		bad.Err = errors.Join(bad.Err, fmt.Errorf("moving it aside: %w", err))
		return bad
	}
	bad.MovedTo = dst
	return bad
}

func sortClaims(cs []Claim) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].UID < cs[j].UID })
}
