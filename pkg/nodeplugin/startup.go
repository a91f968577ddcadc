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
// waits on something outside the node (the API server) is bounded, so a start-up ends.
type startup struct {
	mu    sync.Mutex
	step  string
	since time.Time
	// health and ready answer /healthz and /readyz once the plugin serves; nil before.
	health http.Handler
	ready  func() error
}

func newStartup() *startup { return &startup{step: "the process to start", since: time.Now()} }

// waitFor records and logs what the start-up waits for now.
func (s *startup) waitFor(ctx context.Context, step string) {
	s.mu.Lock()
	s.step, s.since = step, time.Now()
	s.mu.Unlock()
	klog.FromContext(ctx).Info("Starting up", "waitingFor", step)
}

// serving ends the start-up: from now on the health checker and the registration answer.
func (s *startup) serving(health http.Handler, ready func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health, s.ready = health, ready
}

// starting returns the 503 message while the plugin starts, "" once it serves.
func (s *startup) starting() (string, http.Handler, func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.health != nil {
		return "", s.health, s.ready
	}
	return fmt.Sprintf("starting: waiting for %s (for %s)", s.step, time.Since(s.since).Round(time.Second)), nil, nil
}

func (s *startup) serveHealthz(w http.ResponseWriter, r *http.Request) {
	msg, health, _ := s.starting()
	if health == nil {
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	health.ServeHTTP(w, r)
}

func (s *startup) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	msg, _, ready := s.starting()
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
