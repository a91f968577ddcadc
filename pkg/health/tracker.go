package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// StateVersion is the version of the state file; a file of another version is ignored (and
// rewritten) rather than misread.
const StateVersion = "accel-dra.io/health/v1"

// stateFile is the persisted form: the conditions of each device, so that a restarted plugin
// still taints a device the hardware reported broken before the restart (NVML does not repeat
// an XID), with the same timeAdded.
type stateFile struct {
	Version string `json:"version"`
	// BootID ties the state to one boot: a reboot resets every device, so a state from
	// another boot is dropped.
	BootID  string                 `json:"bootID"`
	Devices map[string]deviceState `json:"devices"`
}

type deviceState struct {
	// UUID ties the state to the hardware: a device name that now has another UUID is another
	// device, and its state is dropped.
	UUID         string              `json:"uuid"`
	Conditions   map[Cause]Condition `json:"conditions,omitempty"`
	UnknownSince *time.Time          `json:"unknownSince,omitempty"`
}

// TrackerOptions configure a Tracker.
type TrackerOptions struct {
	// Devices are the devices to track, name to UUID.
	Devices map[string]string
	// Path is the state file; empty keeps the state in memory only.
	Path   string
	BootID string
	Clock  clock.Clock
}

// Tracker holds the health of a node's devices. It is safe for concurrent use.
type Tracker struct {
	opts  TrackerOptions
	clock clock.Clock

	mu      sync.Mutex
	devices map[string]*tracked
	changed chan struct{}
	synced  chan struct{}
}

type tracked struct {
	uuid         string
	watched      bool
	conditions   map[Cause]Condition
	unknownSince time.Time
	updated      time.Time
}

func (t *tracked) state() State {
	switch {
	case len(t.conditions) > 0:
		return Unhealthy
	case t.watched:
		return Healthy
	}
	return Unknown
}

// Transition is a change of a device's state, for events, logs and metrics.
type Transition struct {
	Device   string
	From, To State
	// Message is the device's message after the change (DeviceHealth.Message).
	Message string
}

// NewTracker loads the state file, keeping what belongs to this boot and these devices. An
// unreadable file is an error: silently starting clean would untaint a broken device.
func NewTracker(opts TrackerOptions) (*Tracker, error) {
	t := &Tracker{opts: opts, clock: opts.Clock, devices: map[string]*tracked{}, changed: make(chan struct{}), synced: make(chan struct{})}
	if t.clock == nil {
		t.clock = clock.RealClock{}
	}
	now := t.clock.Now().Truncate(time.Second)
	for name, uuid := range opts.Devices {
		t.devices[name] = &tracked{uuid: uuid, conditions: map[Cause]Condition{}, unknownSince: now, updated: now}
	}
	if opts.Path == "" {
		return t, nil
	}
	data, err := os.ReadFile(opts.Path)
	if errors.Is(err, os.ErrNotExist) {
		data, err = []byte("{}"), nil
	}
	if err != nil {
		return nil, fmt.Errorf("device health state: %w", err)
	}
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("device health state %s: %w (delete the file to start with every device healthy)", opts.Path, err)
	}
	if f.Version != StateVersion || f.BootID != opts.BootID {
		f.Devices = nil
	}
	for name, ds := range f.Devices {
		d, ok := t.devices[name]
		if !ok || d.uuid != ds.UUID {
			continue
		}
		for c, cond := range ds.Conditions {
			d.conditions[c] = cond
		}
		if ds.UnknownSince != nil {
			d.unknownSince = *ds.UnknownSince
		}
	}
	// Written at once so that the time a device was first unknown survives a restart even if
	// nothing changes before it.
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.saveLocked(); err != nil {
		return nil, err
	}
	return t, nil
}

// Changes returns a channel that is closed at the next change of any device's state or
// conditions.
func (t *Tracker) Changes() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// Synced is closed once the source reported its Synced event.
func (t *Tracker) Synced() <-chan struct{} { return t.synced }

// Apply records an event. It returns the state transition it caused, if any, and whether the
// device's conditions changed (a second cause, another XID), which changes taints without
// changing the state. An event for an unknown device is an error.
func (t *Tracker) Apply(ev Event) (*Transition, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Type == Synced {
		select {
		case <-t.synced:
		default:
			close(t.synced)
		}
		return nil, false, nil
	}
	d, ok := t.devices[ev.Device]
	if !ok {
		return nil, false, fmt.Errorf("health event %s: no such device", ev)
	}
	now := t.clock.Now().Truncate(time.Second)
	from := d.state()
	changed := false
	switch ev.Type {
	case Watching:
		if !d.watched {
			d.watched = true
			changed = true
		}
	case Fault:
		if ev.Cause == "" || ev.Cause == CauseUnknown {
			return nil, false, fmt.Errorf("health event %s: a fault needs a cause", ev)
		}
		cur, had := d.conditions[ev.Cause]
		next := Condition{Code: ev.Code, Message: ev.Message, Since: now}
		if ev.Hold > 0 {
			// Not truncated as Since is: a hold may be shorter than a second.
			next.Until = t.clock.Now().Add(ev.Hold)
		}
		if had {
			next.Since = cur.Since
		}
		// A transient fault does not shorten a persistent one of the same cause: the device
		// still needs the recovery the first one asked for, and its taint keeps that fault's
		// code.
		if had && cur.Until.IsZero() && !next.Until.IsZero() {
			break
		}
		if !had || !cur.equal(next) {
			d.conditions[ev.Cause] = next
			changed = true
		}
	case Recovered:
		for c := range d.conditions {
			if ev.Cause == "" || c == ev.Cause {
				delete(d.conditions, c)
				changed = true
			}
		}
	default:
		return nil, false, fmt.Errorf("health event %s: unknown type", ev)
	}
	if !changed {
		return nil, false, nil
	}
	tr, err := t.changedLocked(ev.Device, d, from, now)
	return tr, true, err
}

// changedLocked records that d's conditions changed from state from: it saves the state and
// announces the change, and returns the transition, if any.
func (t *Tracker) changedLocked(name string, d *tracked, from State, now time.Time) (*Transition, error) {
	d.updated = now
	if d.state() == Unknown && from != Unknown {
		d.unknownSince = now
	}
	// A state that cannot be saved is still acted on: the device is broken whether or not the
	// next restart will remember it. The error says the latter.
	err := t.saveLocked()
	close(t.changed)
	t.changed = make(chan struct{})
	var tr *Transition
	if to := d.state(); to != from {
		tr = &Transition{Device: name, From: from, To: to, Message: t.healthLocked(name, d).Message()}
	}
	return tr, err
}

func (c Condition) equal(o Condition) bool {
	return c.Code == o.Code && c.Message == o.Message && c.Since.Equal(o.Since) && c.Until.Equal(o.Until)
}

// Expire clears the transient conditions whose hold is over, also those restored from before a
// restart. It returns the transitions it caused, in device order, and when the next transient
// condition is due (zero if none is).
func (t *Tracker) Expire() (transitions []*Transition, next time.Time, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	for _, name := range SortedDevices(t.devices) {
		d := t.devices[name]
		from := d.state()
		changed := false
		for c, cond := range d.conditions {
			switch {
			case cond.Until.IsZero():
			case !cond.Until.After(now):
				delete(d.conditions, c)
				changed = true
			case next.IsZero() || cond.Until.Before(next):
				next = cond.Until
			}
		}
		if !changed {
			continue
		}
		tr, serr := t.changedLocked(name, d, from, now.Truncate(time.Second))
		if tr != nil {
			transitions = append(transitions, tr)
		}
		err = errors.Join(err, serr)
	}
	return transitions, next, err
}

// RunExpiry clears transient conditions when their hold ends, until ctx is done, and hands each
// transition it causes to report (and a save error to report, with a nil transition).
func (t *Tracker) RunExpiry(ctx context.Context, report func(*Transition, error)) {
	timer := t.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Read before Expire, so that a transient fault that arrives meanwhile wakes the loop.
		changes := t.Changes()
		trs, next, err := t.Expire()
		if err != nil {
			report(nil, err)
		}
		for _, tr := range trs {
			report(tr, nil)
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(t.clock.Now())
		}
		timer.Stop()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-timer.C():
		}
	}
}

// Snapshot returns every device's health, sorted by name.
func (t *Tracker) Snapshot() []DeviceHealth {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]DeviceHealth, 0, len(t.devices))
	for name, d := range t.devices {
		out = append(out, t.healthLocked(name, d))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

func (t *Tracker) healthLocked(name string, d *tracked) DeviceHealth {
	h := DeviceHealth{Device: name, State: d.state(), Updated: d.updated}
	if h.State == Unknown {
		h.UnknownSince = d.unknownSince
	}
	for c, cond := range d.conditions {
		h.Conditions = append(h.Conditions, CauseCondition{Cause: c, Condition: cond})
	}
	sort.Slice(h.Conditions, func(i, j int) bool { return h.Conditions[i].Cause < h.Conditions[j].Cause })
	return h
}

// saveLocked writes the state atomically: a temporary file, fsync, rename, fsync of the
// directory, so that a crash leaves the old or the new state, never half of one.
func (t *Tracker) saveLocked() error {
	if t.opts.Path == "" {
		return nil
	}
	f := stateFile{Version: StateVersion, BootID: t.opts.BootID, Devices: map[string]deviceState{}}
	for name, d := range t.devices {
		if len(d.conditions) == 0 && d.state() != Unknown {
			continue
		}
		ds := deviceState{UUID: d.uuid, Conditions: d.conditions}
		if d.state() == Unknown {
			us := d.unknownSince
			ds.UnknownSince = &us
		}
		f.Devices[name] = ds
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(t.opts.Path, data)
}

func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("device health state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".health-*.tmp")
	if err != nil {
		return fmt.Errorf("device health state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("device health state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("device health state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("device health state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("device health state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
