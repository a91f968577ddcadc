package checkpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Locked is the node-wide lock held; see the package comment. Every method must be called
// before Unlock, from the goroutine that called Lock.
type Locked struct {
	s       *Store
	gen     uint64
	seen    uint64 // the generation this Store saw at its last hold
	changed bool
	unseen  bool // Unlock leaves seenGen alone: see NotSeen
}

// The lock file holds the generation (8 bytes, little endian) and, after it, a ring of the
// last changeLogSize changes: per generation g, slot g%changeLogSize holds g and the UID whose
// record that change wrote or removed. A process that finds the generation moved reads the
// records of those UIDs only, instead of the whole directory; it reads everything when a
// generation it needs is not in its slot (overwritten by later changes, or bumped by a plugin
// that does not write the ring).
const (
	changeLogSize = 256
	slotSize      = 8 + 1 + 128 // generation, UID length, UID (validateUID allows 128 bytes)
	genSize       = 8
)

// DefaultLockTimeout bounds a wait for the node lock whose context has no earlier deadline. A
// hold is a decision and a few small file operations (milliseconds; seconds when an MPS daemon
// starts), so a wait this long means the holder is hung, and failing the call (the kubelet
// retries it) is better than queueing every call of the node behind it.
const DefaultLockTimeout = 30 * time.Second

// ErrLockTimeout is the error of a wait for the node lock that ran past the Store's timeout.
var ErrLockTimeout = errors.New("timed out waiting for the node lock")

// The poll interval of a wait for another process's flock: it starts short, since holds are
// short, and doubles up to the cap, which bounds both the syscalls spent waiting and the
// latency a waiter adds once the lock is free.
const (
	lockPollMin = 20 * time.Microsecond
	lockPollMax = time.Millisecond
)

// SetLockTimeout sets how long LockContext waits at most, whatever its context; 0 or less
// waits as long as the context allows. Open sets DefaultLockTimeout.
func (s *Store) SetLockTimeout(d time.Duration) { s.lockTimeout.Store(int64(d)) }

// Lock is LockContext without a context of its own (the Store's timeout still applies).
func (s *Store) Lock() (*Locked, error) { return s.LockContext(context.Background()) }

// LockContext takes the node-wide lock, waiting for it until ctx is done or the Store's lock
// timeout passes. Hold it only for decisions and the small writes that publish them: every
// prepare on the node queues behind it.
//
// Waiting for another process polls flock(LOCK_NB) rather than blocking in flock(LOCK_EX): a
// blocking flock cannot be interrupted by a context, so a caller that gives up would leave a
// goroutine (and an OS thread) behind that takes the lock later for nobody and must hand it
// back, while every other waiter queues behind it. Another process holds the lock only during
// a rolling update, and then for short holds, so the poll (20 µs doubling to 1 ms) costs
// little; goroutines of this process queue on lockSem without polling.
func (s *Store) LockContext(ctx context.Context) (*Locked, error) {
	if d := time.Duration(s.lockTimeout.Load()); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, fmt.Errorf("%w (%s): another plugin process may be hung holding %s", ErrLockTimeout, d, s.lockFile.Name()))
		defer cancel()
	}
	select {
	case s.lockSem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("locking checkpoint: %w", context.Cause(ctx))
	}
	if err := s.flockContext(ctx); err != nil {
		<-s.lockSem
		return nil, fmt.Errorf("locking checkpoint: %w", err)
	}
	gen, err := s.readGen()
	if err != nil {
		_ = flock(s.lockFile, syscall.LOCK_UN)
		<-s.lockSem
		return nil, fmt.Errorf("locking checkpoint: %w", err)
	}
	return &Locked{s: s, gen: gen, seen: s.seenGen, changed: gen != s.seenGen}, nil
}

// flockContext takes the flock, polling while another process holds it, until ctx is done.
func (s *Store) flockContext(ctx context.Context) error {
	err := flock(s.lockFile, syscall.LOCK_EX|syscall.LOCK_NB)
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return err
	}
	delay := lockPollMin
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-timer.C:
		}
		err := flock(s.lockFile, syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		delay = min(2*delay, lockPollMax)
		timer.Reset(delay)
	}
}

// NotSeen makes Unlock forget this hold: the next Lock reports Changed again (and Changes
// counts from the last hold that did see them). For a caller that could not bring its view of
// the directory up to date.
func (l *Locked) NotSeen() { l.unseen = true }

// Unlock releases the lock.
func (l *Locked) Unlock() {
	if !l.unseen {
		l.s.seenGen = l.gen
	}
	_ = flock(l.s.lockFile, syscall.LOCK_UN)
	<-l.s.lockSem
}

// Changed reports whether another process wrote to the directory since this Store last held the
// lock, i.e. whether an index built from earlier reads may be out of date. It is true on the
// first Lock of a Store.
func (l *Locked) Changed() bool { return l.changed }

// bump advances the generation before a write of uid's record and logs uid as its change.
// Before, not after: a process killed between its write and the bump would otherwise leave a
// change nobody notices. The slot is written before the generation, so a generation another
// process can see always has its slot (or an older plugin's bump, which the slot's generation
// tells apart).
func (l *Locked) bump(uid string) error {
	g := l.gen + 1
	slot := make([]byte, slotSize)
	binary.LittleEndian.PutUint64(slot, g)
	slot[8] = byte(copy(slot[9:], uid))
	if _, err := l.s.lockFile.WriteAt(slot, genSize+int64(g%changeLogSize)*slotSize); err != nil {
		return fmt.Errorf("checkpoint generation: %w", err)
	}
	var b [genSize]byte
	binary.LittleEndian.PutUint64(b[:], g)
	if _, err := l.s.lockFile.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("checkpoint generation: %w", err)
	}
	l.gen = g
	return nil
}

// bumpCorrupt announces records moved aside. A file name that is no UID is logged as an empty
// UID, which makes the others read everything.
func (l *Locked) bumpCorrupt(bad []Corrupt) error {
	for _, c := range bad {
		uid := strings.TrimSuffix(filepath.Base(c.Path), recordExt)
		if validateUID(uid) != nil {
			uid = ""
		}
		if err := l.bump(uid); err != nil {
			return err
		}
	}
	return nil
}

// Changes returns the UIDs whose records other processes wrote or removed since this Store
// last held the lock, sorted and without repeats, for the caller to read again (Get) instead of
// the whole directory. ok is false when that is not known (the first hold, more changes than
// the lock file keeps, or a writer that does not log them): then Reload.
func (l *Locked) Changes() (uids []string, ok bool) {
	if !l.changed {
		return nil, true
	}
	if l.seen == ^uint64(0) || l.gen < l.seen || l.gen-l.seen > changeLogSize {
		return nil, false
	}
	ring := make([]byte, changeLogSize*slotSize)
	n, err := l.s.lockFile.ReadAt(ring, genSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false
	}
	ring = ring[:n]
	set := map[string]bool{}
	for g := l.seen + 1; g <= l.gen; g++ {
		off := int(g%changeLogSize) * slotSize
		if off+slotSize > len(ring) {
			return nil, false
		}
		slot := ring[off : off+slotSize]
		if binary.LittleEndian.Uint64(slot) != g || int(slot[8]) > slotSize-9 {
			return nil, false
		}
		uid := string(slot[9 : 9+int(slot[8])])
		if validateUID(uid) != nil {
			return nil, false
		}
		set[uid] = true
	}
	for uid := range set {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	return uids, true
}

func (s *Store) readGen() (uint64, error) {
	var b [8]byte
	n, err := s.lockFile.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	if n < len(b) {
		return 0, nil // new lock file
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Put is Store.Put under the lock.
func (l *Locked) Put(c Claim) error {
	if err := validateUID(c.UID); err != nil {
		return fmt.Errorf("checkpointing claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := l.bump(c.UID); err != nil {
		return err
	}
	return l.s.Put(c)
}

// PutStaged publishes a staged record, replacing any record of the same UID: one rename. A
// staged file removed meanwhile (a start-up Load of another process takes every temporary file
// for the leftover of a crash) is written again from memory, so the record is published either
// way. The Staged is used up, whether PutStaged succeeds or not.
func (l *Locked) PutStaged(st *Staged) error {
	if st.tmp == "" {
		return errors.New("checkpoint: staged record already used")
	}
	tmp := st.tmp
	st.tmp = ""
	if err := l.bump(st.claim.UID); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	l.s.mu.RLock()
	defer l.s.mu.RUnlock()
	err := os.Rename(tmp, l.s.path(st.claim.UID))
	if errors.Is(err, fs.ErrNotExist) {
		err = l.s.writeAtomic(st.claim.UID, st.data)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("checkpointing claim %s/%s (%s): %w", st.claim.Namespace, st.claim.Name, st.claim.UID, err)
	}
	return nil
}

// Delete is Store.Delete under the lock.
func (l *Locked) Delete(uid string) error {
	if err := validateUID(uid); err != nil {
		return fmt.Errorf("deleting checkpoint: %w", err)
	}
	if err := l.bump(uid); err != nil {
		return err
	}
	return l.s.Delete(uid)
}

// Load is Store.Load under the lock, for start-up: it removes temporary files. Under the lock
// none of them is a Put in flight; one may be a record another process staged (Store.Stage),
// whose PutStaged then writes it again.
func (l *Locked) Load(ctx context.Context) (*LoadResult, error) {
	res, err := l.s.Load(ctx)
	if err != nil {
		return nil, err
	}
	// Reading changes nothing another process could have indexed, except moving aside a record
	// that went bad after it was read; only that is announced. (Bumping on every Load would make
	// two instances re-read the directory on every hold, each triggering the other.)
	if err := l.bumpCorrupt(res.Corrupt); err != nil {
		return nil, err
	}
	return res, nil
}

// Reload is Load for a process that already runs next to others: it leaves temporary files
// alone, because under the lock they may be records another process has staged
// (Store.Stage) and is about to publish, not leftovers of a crash. Start-up uses Load, which
// removes them.
func (l *Locked) Reload(ctx context.Context) (*LoadResult, error) {
	res, err := l.s.load(ctx, false)
	if err != nil {
		return nil, err
	}
	if err := l.bumpCorrupt(res.Corrupt); err != nil {
		return nil, err
	}
	return res, nil
}

// Get reads the record of one claim of this boot. found is false when there is none or it is
// from another boot. A damaged record is moved aside and returned as a *Corrupt error, with
// found false; an intact one this plugin does not own is found, with Foreign set.
func (l *Locked) Get(uid string) (c Claim, found bool, err error) {
	if err := validateUID(uid); err != nil {
		return Claim{}, false, err
	}
	path := l.s.path(uid)
	bootID, c, err := l.s.readRecord(path, uid)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Claim{}, false, nil
	case err != nil:
		if berr := l.bump(uid); berr != nil {
			return Claim{}, false, berr
		}
		bad := l.s.moveAside(path, err)
		return Claim{}, false, &bad
	case bootID != l.s.bootID:
		return Claim{}, false, nil
	}
	return c, true, nil
}

// Register marks the calling process as the live instance id until release is called or the
// process dies. Call it once per process, under the lock, so that a concurrent Alive cannot
// remove the file between its creation and its flock.
func (l *Locked) Register(id string) (release func(), err error) {
	if err := validateUID(id); err != nil {
		return nil, fmt.Errorf("instance ID: %w", err)
	}
	dir := filepath.Join(l.s.dir, InstancesDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("registering instance: %w", err)
	}
	path := filepath.Join(dir, id+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registering instance: %w", err)
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("registering instance %s: %w", id, err)
	}
	return func() {
		_ = os.Remove(path)
		_ = f.Close()
	}, nil
}

// Alive reports whether the instance id is registered by a live process (this one included).
// The lock file of a dead instance is removed on the way.
func (l *Locked) Alive(id string) bool {
	if validateUID(id) != nil {
		return false
	}
	path := filepath.Join(l.s.dir, InstancesDir, id+".lock")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		// Missing: never registered here or already found dead. Any other error: the file
		// cannot be ours to wait on either.
		return false
	}
	defer func() { _ = f.Close() }()
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = os.Remove(path)
	return false
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// PruneInstances removes the lock files of instances that are no longer alive, which a process
// killed without releasing its registration leaves behind (one per crash, otherwise).
func (l *Locked) PruneInstances() {
	entries, err := os.ReadDir(filepath.Join(l.s.dir, InstancesDir))
	if err != nil {
		return
	}
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".lock"); ok {
			l.Alive(id)
		}
	}
}
