// Package healthtest runs a backend's real health source for tests of that backend.
package healthtest

import (
	"context"
	"testing"

	"github.com/accel-dra/accel-dra/pkg/device"
	"github.com/accel-dra/accel-dra/pkg/health"
)

// Watch runs src into a new tracker of devs until ctx ends, as the plugin does, and returns the
// tracker and a channel that gets Run's error. An event the tracker refuses fails the test.
func Watch(ctx context.Context, t testing.TB, src health.Source, devs []device.Device) (*health.Tracker, <-chan error) {
	t.Helper()
	uuids := make(map[string]string, len(devs))
	for _, d := range devs {
		uuids[d.Name] = d.UUID
	}
	tr, err := health.NewTracker(health.TrackerOptions{Devices: uuids})
	if err != nil {
		t.Fatal(err)
	}
	return tr, WatchTracker(ctx, t, src, tr)
}

// WatchTracker runs src into tr until ctx ends, and tr's expiry of transient faults, as the
// plugin does, and returns a channel that gets Run's error once both have stopped. An event
// the tracker refuses fails the test.
func WatchTracker(ctx context.Context, t testing.TB, src health.Source, tr *health.Tracker) <-chan error {
	done := make(chan error, 1)
	expired := make(chan struct{})
	go func() {
		defer close(expired)
		tr.RunExpiry(ctx, func(_ *health.Transition, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}()
	go func() {
		err := src.Run(ctx, func(ev health.Event) {
			if _, _, err := tr.Apply(ev); err != nil {
				t.Error(err)
			}
		})
		<-expired
		done <- err
	}()
	return done
}
