package phase

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
)

// Labels are the labels of every object the plan creates for a component.
func Labels(plan, component string) map[string]string {
	return map[string]string{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: component}
}

// An owner reference that blocks the plan's deletion until the object is
// gone takes, where the OwnerReferencesPermissionEnforcement admission
// plugin runs, update on the plan's finalizers.
//
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans/finalizers,verbs=update

// own labels obj as the plan's and makes the plan its controlling owner, so
// that it is found, watched and garbage-collected with the plan.
func (s *Scope) own(obj client.Object, component string) error {
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range Labels(s.Plan.Name, component) {
		l[k] = v
	}
	obj.SetLabels(l)
	return controllerutil.SetControllerReference(s.Plan, obj, s.Client.Scheme())
}

// create creates an object the plan owns. An object that already exists
// (created by an earlier pass whose status write was lost) is fine: names are
// deterministic.
func (s *Scope) create(ctx context.Context, obj client.Object, component string) error {
	if err := s.own(obj, component); err != nil {
		return err
	}
	err := s.Client.Create(ctx, obj)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// get reads an object from the cache; found is false when it does not exist.
func (s *Scope) get(ctx context.Context, namespace, name string, obj client.Object, opts ...client.GetOption) (found bool, err error) {
	err = s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj, opts...)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// boundedWait waits for a condition until a deadline measured from when the
// plan entered its current phase, then fails the plan. waiting says what it
// waits for; failure says what went wrong and what to do.
func (s *Scope) boundedWait(limit time.Duration, waiting, failure string) Result {
	entered, ok := pipeline.EnteredAt(&s.Plan.Status, s.Plan.Status.CurrentPhase)
	if !ok {
		entered = s.Now()
	}
	deadline := s.deadline(entered, limit)
	left := deadline.Sub(s.Clock.Now())
	if left <= 0 {
		return Fail("%s (gave up after %s)", failure, limit)
	}
	// The deadline, not a countdown: a message that changes on every pass
	// would be a status write on every pass.
	return Wait("%s (giving up at %s, %s after the phase began)", waiting, deadline.UTC().Format(time.RFC3339), limit).After(min(left, 30*time.Second))
}

// specHashAnnotation records, on an object the plan manages, a hash of the
// desired state it was last written with: the object is written again only
// when that changes, never because the API server filled in defaults.
const specHashAnnotation = v1beta1.Prefix + "spec-hash"

func specHash(desired any) (string, error) {
	b, err := json.Marshal(desired)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// The objects the phases create and keep as the plan wants them.
//
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=harvester-system,resources=virtualmachineimages,verbs=create
// +kubebuilder:rbac:groups=batch,namespace=harvester-system,resources=jobs,verbs=create
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=services,verbs=create;patch
// +kubebuilder:rbac:groups=apps,namespace=harvester-system,resources=deployments,verbs=create;patch
// +kubebuilder:rbac:groups=upgrade.cattle.io,namespace=cattle-system,resources=plans,verbs=create;patch

// ensure makes an object the plan owns match what the plan wants. It reads
// the object into live; if it does not exist it creates want; if the
// desired state (hashed) changed since it was last written, update brings
// live to it and live is patched. A pass that changes nothing writes
// nothing.
func (s *Scope) ensure(ctx context.Context, want, live client.Object, component string, desired any, update func()) error {
	hash, err := specHash(desired)
	if err != nil {
		return err
	}
	found, err := s.get(ctx, want.GetNamespace(), want.GetName(), live)
	if err != nil {
		return err
	}
	if !found {
		want.SetAnnotations(withAnnotation(want.GetAnnotations(), specHashAnnotation, hash))
		return s.create(ctx, want, component)
	}
	if live.GetAnnotations()[specHashAnnotation] == hash {
		return nil
	}
	patch := func() error {
		before := live.DeepCopyObject().(client.Object)
		update()
		live.SetAnnotations(withAnnotation(live.GetAnnotations(), specHashAnnotation, hash))
		if err := s.own(live, component); err != nil {
			return err
		}
		return s.Client.Patch(ctx, live, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	}
	err = patch()
	if apierrors.IsConflict(err) {
		// Written since the cache saw it, e.g. system-upgrade-controller
		// writing its Plan's status while the plan changes the nodes the
		// Plan takes: once more, from the API server's copy. (A patch
		// from the cache's copy without the lock would leave out a field
		// that copy already had as wanted but the server had not, and the
		// hash would then say the object is as wanted when it is not.)
		if err = s.reread(ctx, live); err == nil {
			err = patch()
		}
	}
	if err != nil {
		return fmt.Errorf("updating %T %s/%s: %w", live, live.GetNamespace(), live.GetName(), err)
	}
	return nil
}

// reread reads obj again from the API server. It lists the object's kind
// in its namespace by name: the role lists what the cache watches, and a
// get would be a permission for this one path.
func (s *Scope) reread(ctx context.Context, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, s.Client.Scheme())
	if err != nil {
		return err
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := s.APIReader.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", obj.GetName())}); err != nil {
		return err
	}
	if len(list.Items) != 1 {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, obj.GetName())
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[0].Object, obj)
}

func withAnnotation(a map[string]string, k, v string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	return a
}
