// Package checkpoint is the plugin's crash-safe memory of prepared claims.
//
// Each claim is one record file, `<dir>/<claimUID>.json`, rather than one file holding every
// claim: rewriting a shared file makes every prepare cost O(prepared claims) in encoding and
// I/O, while one file per claim keeps Put and Delete at one small write and two fsyncs whether
// ten or a thousand claims are prepared. Only Load, at start-up, looks at the whole directory.
//
// A record carries the boot ID and a checksum. A record that cannot be trusted (unreadable,
// truncated, bad checksum, unknown version) is moved aside into `<dir>/corrupt/` and reported;
// it never fails Load, because a plugin that refuses to start over one bad file crash-loops and
// then cannot unprepare anything at all.
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
}

// Corrupt is a record that could not be trusted and was moved aside.
type Corrupt struct {
	// Path is where the record was.
	Path string
	// MovedTo is where it is now; empty if moving it failed too (Err then says why).
	MovedTo string
	Err     error
}

// LoadResult is what Load found.
type LoadResult struct {
	// Claims are the records of this boot, sorted by UID.
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
	return &Store{dir: dir, bootID: bootID}, nil
}

// Dir is the directory the store keeps its records in.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(uid string) string { return filepath.Join(s.dir, uid+recordExt) }

// Put records c, replacing any record of the same UID. When it fails the previous record, if
// any, is intact. A PrepareCompleted record survives a crash or power loss when Put returns nil.
//
// A PrepareStarted record is renamed into place without the two fsyncs. It only has to outlive
// a crash of the plugin process, and the page cache does: the data is lost only when the kernel
// goes down, which is a reboot, and a reboot starts from a clean slate anyway. Skipping them
// halves the disk syncs on the prepare path, which the kubelet waits on.
func (s *Store) Put(c Claim) error {
	data, err := encodeRecord(s.bootID, &c)
	if err != nil {
		return fmt.Errorf("checkpointing claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writeAtomic(c.UID, data, c.State == StatePrepareCompleted); err != nil {
		return fmt.Errorf("checkpointing claim %s/%s (%s): %w", c.Namespace, c.Name, c.UID, err)
	}
	return nil
}

// writeAtomic is the classic sequence: temp file in the same directory, fsync it, rename over
// the record, fsync the directory so the rename itself is durable. Without durable, the rename
// is still atomic for readers but the fsyncs are left out.
func (s *Store) writeAtomic(uid string, data []byte, durable bool) (err error) {
	f, err := os.CreateTemp(s.dir, tempPrefix+uid+recordExt+".*"+tempSuffix)
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if durable {
		if err = f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, s.path(uid)); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	return syncDir(s.dir)
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
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("deleting checkpoint of claim %s: %w", uid, err)
	}
	return nil
}

// Load reads every record. Only a failure to read the directory itself is an error; each bad
// record is moved aside and reported in the result instead.
func (s *Store) Load(ctx context.Context) (*LoadResult, error) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()

	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint: %w", err)
	}
	res := &LoadResult{}
	removedTemp := false
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("loading checkpoint: %w", err)
		}
		name := e.Name()
		path := filepath.Join(s.dir, name)
		switch {
		case name == CorruptDir && e.IsDir():
			continue
		case strings.HasPrefix(name, tempPrefix) && strings.HasSuffix(name, tempSuffix):
			// An interrupted Put: the rename never happened, so the previous record (if any)
			// is still the truth and the temp file is garbage.
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				logger.Error(err, "Could not remove leftover temporary checkpoint file", "path", path)
			} else {
				logger.V(2).Info("Removed leftover temporary checkpoint file", "path", path)
				removedTemp = true
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
		res.Claims = append(res.Claims, c)
	}
	if removedTemp {
		if err := syncDir(s.dir); err != nil {
			logger.Error(err, "Could not sync checkpoint directory", "dir", s.dir)
		}
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
	// Best effort: if the move is lost in a crash, the next Load simply moves it again.
	_ = syncDir(cdir)
	_ = syncDir(s.dir)
	return bad
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func sortClaims(cs []Claim) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].UID < cs[j].UID })
}
