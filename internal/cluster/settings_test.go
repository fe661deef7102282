package cluster_test

import (
	"context"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// The node upgrade asks for its settings on every pass: each write happens
// once, and a pass that finds them made writes nothing.
func TestNodeUpgradeSettingsAreWrittenOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	patches := 0
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	c := interceptor.NewClient(direct, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches++
			return c.Patch(ctx, obj, patch, opts...)
		},
	})

	local := &provisioningv1.Cluster{}
	key := client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}
	if err := c.Get(ctx, key, local); apierrors.IsNotFound(err) {
		local = &provisioningv1.Cluster{ObjectMeta: objMeta(key.Namespace, key.Name), Spec: provisioningv1.ClusterSpec{KubernetesVersion: "v1.34.4+rke2r1"}}
		if err := c.Create(ctx, local); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	} else {
		local.Spec = provisioningv1.ClusterSpec{KubernetesVersion: "v1.34.4+rke2r1"}
		if err := c.Update(ctx, local); err != nil {
			t.Fatal(err)
		}
	}
	// writes reports whether an object was patched since its last read,
	// and fails the test on a patch that changed nothing.
	writes := func(obj client.Object) bool {
		t.Helper()
		before, n := obj.GetResourceVersion(), patches
		patches = 0
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		changed := obj.GetResourceVersion() != before
		if n > 0 && !changed {
			t.Errorf("%d patch(es) of %s changed nothing", n, obj.GetName())
		}
		return changed
	}

	roll := func(version string, generation int64) {
		t.Helper()
		if err := cluster.RollNodes(ctx, c, version, generation); err != nil {
			t.Fatal(err)
		}
	}
	roll("v1.35.2+rke2r1", 3)
	if !writes(local) {
		t.Fatal("RollNodes wrote nothing to a Cluster without an upgrade strategy")
	}
	rke := local.Spec.RKEConfig
	if local.Spec.KubernetesVersion != "v1.35.2+rke2r1" || rke == nil || rke.ProvisionGeneration != 3 || rke.UpgradeStrategy == nil ||
		len(rke.UpgradeStrategy.WorkerDrainOptions.PreDrainHooks) != 1 || rke.UpgradeStrategy.WorkerDrainOptions.PreDrainHooks[0].Annotation != v1beta1.AnnotationPreHook {
		t.Fatalf("the Cluster does not roll the nodes through the toolkit's hooks: %+v", local.Spec)
	}
	roll("v1.35.2+rke2r1", 3)
	if writes(local) {
		t.Error("RollNodes wrote to a Cluster that already rolls the nodes")
	}
	roll("v1.35.2+rke2r1", 4)
	if !writes(local) || local.Spec.RKEConfig.ProvisionGeneration != 4 {
		t.Errorf("RollNodes did not set a new provisionGeneration: %+v", local.Spec.RKEConfig)
	}

	setting := &longhornv1beta2.Setting{ObjectMeta: objMeta(cluster.LonghornNamespace, cluster.LonghornReplicaReplenishmentWaitInterval), Value: "600"}
	// Another test of the package may have made it.
	if err := c.Delete(ctx, setting); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, setting); err != nil {
		t.Fatal(err)
	}
	addon := &harvesterv1beta1.Addon{ObjectMeta: objMeta(cluster.KubeSystemNamespace, "descheduler-once"),
		Spec: harvesterv1beta1.AddonSpec{Enabled: true, Repo: "http://repo", Chart: "descheduler", Version: "0.33.0"}}
	if err := c.Create(ctx, addon); err != nil {
		t.Fatal(err)
	}
	for pass := range 2 {
		if err := cluster.SetLonghornSetting(ctx, c, setting.Name, cluster.UpgradeReplicaReplenishmentWaitInterval); err != nil {
			t.Fatal(err)
		}
		if err := cluster.SetAddonEnabled(ctx, c, addon.Namespace, addon.Name, false); err != nil {
			t.Fatal(err)
		}
		if got, want := writes(setting), pass == 0; got != want || setting.Value != cluster.UpgradeReplicaReplenishmentWaitInterval {
			t.Errorf("pass %d: Longhorn setting written=%v (want %v), value %q", pass, got, want, setting.Value)
		}
		if got, want := writes(addon), pass == 0; got != want || addon.Spec.Enabled {
			t.Errorf("pass %d: Addon written=%v (want %v), enabled=%v", pass, got, want, addon.Spec.Enabled)
		}
	}
	if err := cluster.SetLonghornSetting(ctx, c, "no-such-setting", "1"); err != nil {
		t.Errorf("a missing Longhorn setting is left alone, got %v", err)
	}
}

// The shared scheme knows the kinds the tests and the toolkit read, the
// CRDs' among them, without anyone registering into it at run time.
func TestSchemeHoldsEveryKindRead(t *testing.T) {
	for _, obj := range []client.Object{&v1beta1.UpgradePlan{}, &apiextv1.CustomResourceDefinition{}, &provisioningv1.Cluster{}, &longhornv1beta2.Setting{}} {
		if _, _, err := cluster.Scheme().ObjectKinds(obj); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
}
