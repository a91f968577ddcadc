package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// openPair opens two Stores over one directory, as two plugin processes do.
func openPair(t *testing.T) (*Store, *Store) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "checkpoint")
	a, err := Open(dir, thisBoot)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, thisBoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

func TestLockExcludesOtherStores(t *testing.T) {
	a, b := openPair(t)
	la, err := a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		lb, err := b.Lock()
		if err != nil {
			t.Error(err)
		} else {
			lb.Unlock()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("second store got the lock while the first held it")
	case <-time.After(100 * time.Millisecond):
	}
	la.Unlock()
	<-got
}

func TestLockChanged(t *testing.T) {
	a, b := openPair(t)
	step := func(s *Store, write bool, wantChanged bool) {
		t.Helper()
		l, err := s.Lock()
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock()
		if l.Changed() != wantChanged {
			t.Errorf("Changed() = %v, want %v", l.Changed(), wantChanged)
		}
		if write {
			if err := l.Put(testClaim(uid(1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	step(a, false, true)  // first look: nothing known yet
	step(a, true, false)  // nobody else wrote; own write...
	step(a, false, false) // ...is not a change for the writer
	step(b, false, true)
	step(b, false, false)
	step(a, true, false)
	step(b, false, true) // a wrote
	step(b, true, false)
	step(a, false, true) // b wrote

	// Reading is not a change: two instances must not make each other re-read forever.
	lb, err := b.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	lb.Unlock()
	step(a, false, false)
}

func TestGet(t *testing.T) {
	a, _ := openPair(t)
	l, err := a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if _, found, err := l.Get(uid(1)); found || err != nil {
		t.Fatalf("Get of missing record: found %v, err %v", found, err)
	}
	c := testClaim(uid(1))
	if err := l.Put(c); err != nil {
		t.Fatal(err)
	}
	if got, found, err := l.Get(uid(1)); !found || err != nil || got.UID != c.UID || len(got.Devices) != len(c.Devices) {
		t.Fatalf("Get: %+v, %v, %v", got, found, err)
	}
	writeFile(t, a.path(uid(2)), []byte("{garbage"))
	_, found, err := l.Get(uid(2))
	var bad *Corrupt
	if found || !errors.As(err, &bad) || bad.MovedTo == "" {
		t.Fatalf("Get of corrupt record: found %v, err %v", found, err)
	}
	if _, err := os.Stat(a.path(uid(2))); !os.IsNotExist(err) {
		t.Errorf("corrupt record not moved aside: %v", err)
	}
	if _, _, err := l.Get("../x"); err == nil {
		t.Error("Get of invalid UID: want error")
	}
}

func TestRegisterAlive(t *testing.T) {
	a, b := openPair(t)
	la, err := a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	release, err := la.Register("inst-a")
	la.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock()
	if !lb.Alive("inst-a") {
		t.Error("registered instance not alive")
	}
	if lb.Alive("inst-never") || lb.Alive("") || lb.Alive("../x") {
		t.Error("unknown instance alive")
	}
	if _, err := lb.Register("inst-a"); err == nil {
		t.Error("second registration of a live instance: want error")
	}
	release()
	if lb.Alive("inst-a") {
		t.Error("released instance still alive")
	}

	// A process that died without releasing leaves its file, unlocked; Alive removes it.
	path := filepath.Join(a.Dir(), InstancesDir, "inst-dead.lock")
	writeFile(t, path, nil)
	if lb.Alive("inst-dead") {
		t.Error("dead instance alive")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("dead instance's file not removed: %v", err)
	}

	writeFile(t, filepath.Join(a.Dir(), InstancesDir, "inst-dead2.lock"), nil)
	releaseB, err := lb.Register("inst-b")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	lb.PruneInstances()
	if got := dirNames(t, filepath.Join(a.Dir(), InstancesDir)); len(got) != 1 || got[0] != "inst-b.lock" {
		t.Errorf("instances after prune: %v, want only the live one", got)
	}
}

// TestStaged: a staged record is invisible until PutStaged, which publishes it in one rename and
// tells the other stores (the generation moves); Discard leaves nothing behind; a staged file
// that a start-up Load of another process removed is published all the same; Reload, unlike
// Load, leaves staged files alone.
func TestStaged(t *testing.T) {
	a, b := openPair(t)
	_, ctx := ktesting.NewTestContext(t)
	lockB := func() *Locked {
		t.Helper()
		l, err := b.Lock()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	lockB().Unlock() // b has seen the directory as it is now

	c := testClaim(uid(1))
	st, err := a.Stage(c)
	if err != nil {
		t.Fatal(err)
	}
	lb := lockB()
	res, err := lb.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Changed() || len(res.Claims) != 0 || len(dirNames(t, a.Dir())) != 1 {
		t.Fatalf("staged record visible or removed: changed %v, %+v, dir %v", lb.Changed(), res.Claims, dirNames(t, a.Dir()))
	}
	lb.Unlock()

	la, err := a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if err := la.PutStaged(st); err != nil {
		t.Fatal(err)
	}
	if err := la.PutStaged(st); err == nil {
		t.Error("a staged record published twice")
	}
	la.Unlock()
	if got := dirNames(t, a.Dir()); fmt.Sprint(got) != fmt.Sprint([]string{uid(1) + ".json"}) {
		t.Fatalf("directory after PutStaged: %v", got)
	}
	lb = lockB()
	got, found, err := lb.Get(uid(1))
	if !lb.Changed() || !found || err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("after PutStaged: changed %v, found %v, %v, %+v", lb.Changed(), found, err, got)
	}
	lb.Unlock()

	discarded, err := a.Stage(testClaim(uid(2)))
	if err != nil {
		t.Fatal(err)
	}
	discarded.Discard()
	discarded.Discard()
	if got := dirNames(t, a.Dir()); len(got) != 1 {
		t.Fatalf("Discard left %v", got)
	}

	lost, err := a.Stage(testClaim(uid(3)))
	if err != nil {
		t.Fatal(err)
	}
	lb = lockB()
	if _, err := lb.Load(ctx); err != nil { // a new instance starting: temporary files go
		t.Fatal(err)
	}
	lb.Unlock()
	la, err = a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if err := la.PutStaged(lost); err != nil {
		t.Fatalf("staged file removed by another's start-up: %v", err)
	}
	if _, found, err := la.Get(uid(3)); !found || err != nil {
		t.Fatalf("record whose staged file was removed: found %v, %v", found, err)
	}
	la.Unlock()
}

// TestChanges: a store learns from the lock file which records the others changed since its
// last hold; it is told to read everything when that is not known: on its first hold, after
// more changes than the lock file keeps, after a writer that bumped the generation without
// logging (an older plugin), and after a hold that did not see the changes (NotSeen).
func TestChanges(t *testing.T) {
	a, b := openPair(t)
	hold := func(s *Store, f func(l *Locked)) {
		t.Helper()
		l, err := s.Lock()
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock()
		f(l)
	}
	want := func(s *Store, uids []string, ok bool) {
		t.Helper()
		hold(s, func(l *Locked) {
			got, gotOK := l.Changes()
			if gotOK != ok || fmt.Sprint(got) != fmt.Sprint(uids) {
				t.Errorf("Changes() = %v, %v; want %v, %v", got, gotOK, uids, ok)
			}
		})
	}
	want(b, nil, false) // first hold: nothing known
	want(b, nil, true)  // nothing changed
	hold(a, func(l *Locked) {
		for _, u := range []string{uid(2), uid(1), uid(2)} {
			if err := l.Put(testClaim(u)); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Delete(uid(3)); err != nil {
			t.Fatal(err)
		}
	})
	want(b, []string{uid(1), uid(2), uid(3)}, true)
	want(a, nil, true) // its own writes are no change for a

	hold(a, func(l *Locked) {
		for i := 0; i <= changeLogSize; i++ {
			if err := l.Delete(uid(i)); err != nil {
				t.Fatal(err)
			}
		}
	})
	want(b, nil, false) // more than the ring holds
	want(b, nil, true)

	// An older plugin bumps the generation alone.
	hold(a, func(l *Locked) {
		var g [8]byte
		if _, err := a.lockFile.ReadAt(g[:], 0); err != nil {
			t.Fatal(err)
		}
		g[0]++
		if _, err := a.lockFile.WriteAt(g[:], 0); err != nil {
			t.Fatal(err)
		}
	})
	want(b, nil, false)

	hold(a, func(l *Locked) {
		if err := l.Put(testClaim(uid(5))); err != nil {
			t.Fatal(err)
		}
	})
	hold(b, func(l *Locked) { l.NotSeen() })
	want(b, []string{uid(5)}, true)
}

// TestLockContext: a waiter for the node lock gives up when its context is done, whether the
// lock is held by another process (flock) or by another goroutine of its own (in-process
// queue), and leaves the lock usable; a Store's lock timeout bounds a wait whose context has no
// deadline (a plugin process hung under the lock must not wedge every call of the other).
func TestLockContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		// holder returns the store whose Lock is held while the waiter waits on a.
		holder func(a, b *Store) *Store
	}{
		{"other process", func(_, b *Store) *Store { return b }},
		{"same process", func(a, _ *Store) *Store { return a }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t)
			held, err := tc.holder(a, b).Lock()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				l, err := a.LockContext(ctx)
				if err == nil {
					l.Unlock()
				}
				done <- err
			}()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("LockContext with a cancelled context: %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("LockContext still waiting 10s after its context was cancelled")
			}

			a.SetLockTimeout(20 * time.Millisecond)
			_, err = a.LockContext(context.Background())
			if !errors.Is(err, ErrLockTimeout) {
				t.Errorf("LockContext past the store's timeout: %v, want ErrLockTimeout", err)
			}
			a.SetLockTimeout(0)

			// The waiters that gave up left nothing behind: the lock is free once released.
			held.Unlock()
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, s := range []*Store{a, b, a} {
				l, err := s.LockContext(ctx)
				if err != nil {
					t.Fatalf("lock after the holder let go: %v", err)
				}
				l.Unlock()
			}
		})
	}
}

// TestLockContextWaitsForHolder: a waiter with a live context gets the lock as soon as the
// other process lets go.
func TestLockContextWaitsForHolder(t *testing.T) {
	a, b := openPair(t)
	lb, err := b.Lock()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := a.LockContext(context.Background())
		if err == nil {
			l.Unlock()
		}
		got <- err
	}()
	select {
	case <-got:
		t.Fatal("got the lock while the other store held it")
	case <-time.After(50 * time.Millisecond):
	}
	lb.Unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
