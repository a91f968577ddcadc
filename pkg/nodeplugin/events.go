package nodeplugin

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/accel-dra/accel-dra/pkg/driver"
)

// EventsNamespaces are the namespaces the plugin's events about its Node may be stored in. A
// Node has no namespace, and the API server takes an event about a cluster-scoped object only
// in default or, through events.k8s.io/v1 (an event with an eventTime), in kube-system
// (k8s.io/kubernetes/pkg/apis/core/validation, legacyValidateEvent).
var EventsNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem}

type nodeEventSink struct {
	rec events.EventRecorder
	ref *corev1.ObjectReference
}

// The action of an event is its reason: each reason names one thing the plugin did or saw.
func (s nodeEventSink) Warning(reason, message string) {
	s.rec.Eventf(s.ref, nil, corev1.EventTypeWarning, reason, reason, "%s", message)
}

func (s nodeEventSink) Normal(reason, message string) {
	s.rec.Eventf(s.ref, nil, corev1.EventTypeNormal, reason, reason, "%s", message)
}

// nodeEvents reports on the Node object, where an operator looks when a node has fewer devices
// than expected, through events.k8s.io/v1, stored in namespace (one of EventsNamespaces; the
// recorder itself would always pick default). kubectl describe node shows them in either.
func nodeEvents(ctx context.Context, kube kubernetes.Interface, nodeName, driverName, namespace string) (driver.EventSink, func()) {
	b := events.NewBroadcaster(namespacedSink{namespace: namespace, sink: &events.EventSinkImpl{Interface: kube.EventsV1()}})
	stop := make(chan struct{})
	b.StartRecordingToSink(stop)
	rec := b.NewRecorder(scheme.Scheme, driverName)
	ref := &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName), APIVersion: "v1"}
	klog.FromContext(ctx).V(2).Info("Recording events about the Node", "namespace", namespace)
	return nodeEventSink{rec: rec, ref: ref}, func() {
		close(stop)
		b.Shutdown()
	}
}

// namespacedSink stores every event in one namespace.
type namespacedSink struct {
	namespace string
	sink      events.EventSink
}

func (s namespacedSink) in(e *eventsv1.Event) *eventsv1.Event {
	e = e.DeepCopy()
	e.Namespace = s.namespace
	return e
}

func (s namespacedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.sink.Create(ctx, s.in(e))
}

func (s namespacedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.sink.Update(ctx, s.in(e))
}

func (s namespacedSink) Patch(ctx context.Context, old *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.sink.Patch(ctx, s.in(old), data)
}

func validEventsNamespace(ns string) error {
	for _, ok := range EventsNamespaces {
		if ns == ok {
			return nil
		}
	}
	return fmt.Errorf("--events-namespace=%q: events about a Node can be stored only in %v (the API server refuses others)", ns, EventsNamespaces)
}

// recordNodeWarning creates one Warning event about the Node directly, not through the
// recorder, whose queue an exit right after would cut short: for a refusal that ends the
// process. events.k8s.io/v1, as the recorder writes them: the chart grants only that API, in
// the events namespace. A failure to record is logged; the refusal stands.
func recordNodeWarning(ctx context.Context, kube kubernetes.Interface, namespace, nodeName, driverName, reason, note string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ev := &eventsv1.Event{
		// events.k8s.io refuses a generateName ending in "."; this is the name client-go's
		// recorder gives.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", nodeName, time.Now().UnixNano()), Namespace: namespace},
		// A Node's UID in the events of the kubelet and of this plugin's recorder is its name.
		Regarding:           corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName), APIVersion: "v1"},
		Reason:              reason,
		Action:              reason,
		Note:                note,
		Type:                corev1.EventTypeWarning,
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: driverName,
		ReportingInstance:   driverName + "-" + nodeName,
	}
	if _, err := kube.EventsV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording a refusal on the Node", "namespace", namespace, "reason", reason)
	}
}
