package nodeplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// refuseLikeAPIServer makes the fake client refuse events the API server refuses for the
// namespace they are stored in (k8s.io/kubernetes/pkg/apis/core/validation,
// legacyValidateEvent): an event about a cluster-scoped object goes to default, or, with an
// eventTime (events.k8s.io/v1), to default or kube-system; an event about a namespaced object
// goes to that object's namespace. The fake stores anything.
func refuseLikeAPIServer(kube *fake.Clientset) {
	kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var ns, about string
		var withTime bool
		switch e := a.(k8stesting.CreateAction).GetObject().(type) {
		case *corev1.Event:
			ns, about, withTime = e.Namespace, e.InvolvedObject.Namespace, !e.EventTime.IsZero()
		case *eventsv1.Event:
			ns, about, withTime = e.Namespace, e.Regarding.Namespace, !e.EventTime.IsZero()
		default:
			return false, nil, nil
		}
		ok := ns == about
		switch {
		case about == "" && withTime:
			ok = ns == metav1.NamespaceDefault || ns == metav1.NamespaceSystem
		case about == "":
			ok = ns == "" || ns == metav1.NamespaceDefault
		case !withTime:
			ok = ns == about
		}
		if !ok {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Event"}, "", field.ErrorList{
				field.Invalid(field.NewPath("involvedObject", "namespace"), about, "does not match event.namespace")})
		}
		return false, nil, nil
	})
}

// TestNodeEventsNamespace: the plugin's events about its Node are stored in the namespace it is
// configured with, where the API server takes them, and name the Node.
func TestNodeEventsNamespace(t *testing.T) {
	for _, ns := range EventsNamespaces {
		t.Run(ns, func(t *testing.T) {
			kube := fake.NewClientset()
			refuseLikeAPIServer(kube)
			sink, stop := nodeEvents(t.Context(), kube, "node-a", GPUDriverName, ns)
			defer stop()
			sink.Warning("InvalidDevice", "gpu.accel-dra.io: device gpu-1 left out")
			var got []eventsv1.Event
			err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				list, err := kube.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				got = list.Items
				return len(got) > 0, nil
			})
			if err != nil {
				t.Fatalf("no event stored: %v (actions %v)", err, kube.Actions())
			}
			for _, e := range got {
				if e.Namespace != ns {
					t.Errorf("event %s stored in namespace %q, want %q", e.Name, e.Namespace, ns)
				}
				if r := e.Regarding; r.Kind != "Node" || r.Name != "node-a" || r.Namespace != "" {
					t.Errorf("event about %+v, want Node node-a", r)
				}
				if e.Reason != "InvalidDevice" || e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "gpu-1") || e.ReportingController != GPUDriverName {
					t.Errorf("event %+v", e)
				}
			}
		})
	}
}

// TestEventsNamespaceOption: default unless set, and a namespace the API server would refuse
// events about a Node in is refused at start.
func TestEventsNamespaceOption(t *testing.T) {
	for args, want := range map[string]string{"": "default", "--events-namespace=kube-system": "kube-system", "--events-namespace=accel-dra": ""} {
		o := NewOptions()
		o.NodeName = "node-a"
		var flags []string
		if args != "" {
			flags = []string{args}
		}
		if err := o.NewFlagSet().Parse(flags); err != nil {
			t.Fatal(err)
		}
		err := o.Complete()
		switch {
		case want == "" && err == nil:
			t.Errorf("%q accepted, want an error", args)
		case want != "" && (err != nil || o.EventsNamespace != want):
			t.Errorf("%q: namespace %q, %v; want %q", args, o.EventsNamespace, err, want)
		}
	}
}

// TestRecordNodeWarning: a refusal that ends the process (NVIDIA's driver on the node, a
// dropped field) is one Warning event about the Node, stored in the events namespace as the
// API server accepts it, with the refusal's message as its note.
func TestRecordNodeWarning(t *testing.T) {
	for _, ns := range EventsNamespaces {
		kube := fake.NewClientset()
		refuseLikeAPIServer(kube)
		msg := "NVIDIA's DRA driver serves this node's GPUs (...)"
		recordNodeWarning(context.Background(), kube, ns, "node-a", "gpu.accel-dra.io", ReasonNVIDIADriverServes, msg)
		list, err := kube.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("namespace %s: %d events, want 1", ns, len(list.Items))
		}
		ev := list.Items[0]
		if ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonNVIDIADriverServes || ev.Note != msg ||
			ev.Regarding.Kind != "Node" || ev.Regarding.Name != "node-a" || ev.ReportingController != "gpu.accel-dra.io" {
			t.Errorf("namespace %s: event %+v", ns, ev)
		}
	}
}
