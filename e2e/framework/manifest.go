package framework

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Apply creates the objects of a multi-document YAML manifest ("---" lines between them), as
// `kubectl create -f` does, so that a test can hold a workload exactly as its users write it.
// Objects without a namespace go to ns. Kinds: ResourceClaimTemplate, ResourceClaim, Pod. Each
// is decoded strictly: a misspelt field fails the test instead of being dropped.
func Apply(ctx context.Context, client kubernetes.Interface, ns, manifest string) error {
	for _, doc := range strings.Split(manifest, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return err
		}
		if err := create(ctx, client, ns, meta.Kind, []byte(doc)); err != nil {
			return fmt.Errorf("creating %s: %w", meta.Kind, err)
		}
	}
	return nil
}

func create(ctx context.Context, client kubernetes.Interface, ns, kind string, doc []byte) error {
	namespace := func(m *metav1.ObjectMeta) string {
		if m.Namespace == "" {
			m.Namespace = ns
		}
		return m.Namespace
	}
	switch kind {
	case "ResourceClaimTemplate":
		o := &resourceapi.ResourceClaimTemplate{}
		if err := yaml.UnmarshalStrict(doc, o); err != nil {
			return err
		}
		_, err := client.ResourceV1().ResourceClaimTemplates(namespace(&o.ObjectMeta)).Create(ctx, o, metav1.CreateOptions{})
		return err
	case "ResourceClaim":
		o := &resourceapi.ResourceClaim{}
		if err := yaml.UnmarshalStrict(doc, o); err != nil {
			return err
		}
		_, err := client.ResourceV1().ResourceClaims(namespace(&o.ObjectMeta)).Create(ctx, o, metav1.CreateOptions{})
		return err
	case "Pod":
		o := &corev1.Pod{}
		if err := yaml.UnmarshalStrict(doc, o); err != nil {
			return err
		}
		_, err := client.CoreV1().Pods(namespace(&o.ObjectMeta)).Create(ctx, o, metav1.CreateOptions{})
		return err
	default:
		return fmt.Errorf("kind %q is not one Apply creates", kind)
	}
}
