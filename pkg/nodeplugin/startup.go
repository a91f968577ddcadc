package nodeplugin

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// startup is the plugin's start-up as its HTTP endpoint tells it, from the first moment of the
// process: /healthz answers 503 "starting: <what it waits for> (for <how long>)" until the
// plugin serves the kubelet, then what the health checker says; /readyz answers 503 until then,
// and afterwards whether the kubelet registered the plugin. A startupProbe on /healthz (see the
// chart) gives the start-up its time, and the livenessProbe, which the kubelet runs only once
// the startupProbe succeeded, does not restart a plugin that is still starting; every step that
// waits on something outside the node (the API server) is bounded, so a start-up ends. The one
// unbounded step, the wait for the NVIDIA driver to appear under its root (waitAlive), answers
// /healthz with 200: a restart would not bring the driver, and the probes must not turn the
// wait into a crash loop.
type startup struct {
	mu    sync.Mutex
	step  string
	since time.Time
	// alive: the step waits, unbounded, for something a restart does not bring.
	alive bool
	// health and ready answer /healthz and /readyz once the plugin serves; nil before.
	health http.Handler
	ready  func() error
	// refused is why the plugin refuses to run (gates.go); /healthz and /readyz answer it
	// with 503 from then on.
	refused string
}

func newStartup() *startup { return &startup{step: "the process to start", since: time.Now()} }

// waitFor records and logs what the start-up waits for now.
func (s *startup) waitFor(ctx context.Context, step string) { s.setStep(ctx, step, false) }

// waitAlive is waitFor for a step that may wait without bound for something a restart does not
// bring: /healthz answers 200 while it lasts (and /readyz 503).
func (s *startup) waitAlive(ctx context.Context, step string) { s.setStep(ctx, step, true) }

// setStep sets the step and whether it is alive at once, so that no probe in between sees the
// alive step as a failing one.
func (s *startup) setStep(ctx context.Context, step string, alive bool) {
	s.mu.Lock()
	s.step, s.since, s.alive = step, time.Now(), alive
	s.mu.Unlock()
	klog.FromContext(ctx).Info("Starting up", "waitingFor", step)
}

// serving ends the start-up: from now on the health checker and the registration answer.
func (s *startup) serving(health http.Handler, ready func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health, s.ready = health, ready
}

// refuse makes /healthz and /readyz answer 503 with msg until the process ends.
func (s *startup) refuse(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = msg
}

// starting returns the message while the plugin starts, and whether the step is alive (see
// waitAlive); "" once it serves.
func (s *startup) starting() (string, bool, http.Handler, func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused != "" {
		refused := "refused: " + s.refused
		return refused, false, nil, nil
	}
	if s.health != nil {
		return "", false, s.health, s.ready
	}
	return fmt.Sprintf("starting: waiting for %s (for %s)", s.step, time.Since(s.since).Round(time.Second)), s.alive, nil, nil
}

func (s *startup) serveHealthz(w http.ResponseWriter, r *http.Request) {
	msg, alive, health, _ := s.starting()
	switch {
	case health != nil:
		health.ServeHTTP(w, r)
	case alive:
		_, _ = w.Write([]byte(msg + "\n"))
	default:
		http.Error(w, msg, http.StatusServiceUnavailable)
	}
}

func (s *startup) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	msg, _, _, ready := s.starting()
	if ready == nil {
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	if err := ready(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}
