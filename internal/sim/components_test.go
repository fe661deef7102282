package sim

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

// watchStates records the distinct states an object goes through, from a
// watch: every update the API server makes is seen, however quick.
func watchStates(t *testing.T, obj client.Object, list client.ObjectList, state func() string) func() []string {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(t.Context(), list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{"metadata.name": obj.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(client.Object)
			if !ok || reflect.TypeOf(o) != reflect.TypeOf(obj) {
				continue
			}
			mu.Lock()
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o).Elem())
			if st := state(); len(seen) == 0 || seen[len(seen)-1] != st {
				seen = append(seen, st)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestFleetDeploysAChartChange: Rancher passes a ManagedChart's change on
// to its Bundle; Fleet observes the new generation with the deployment not
// ready, then ready; the chart's status is the Bundle's. The harvester chart
// at the release's version brings the release's KubeVirt, Longhorn and
// server-version.
func TestFleetDeploysAChartChange(t *testing.T) {
	s := start(t, Config{Nodes: 2, Timing: Timing{ChartDeploy: 200 * time.Millisecond}})
	ctx := t.Context()
	key := types.NamespacedName{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}
	mc := &managementv3.ManagedChart{}
	eventually(t, 5*time.Second, "Rancher to report the chart's Bundle", func() (bool, string) {
		get(t, key, mc)
		return mc.Status.Summary.Ready == 1, fmt.Sprintf("%+v", mc.Status)
	})
	before := mc.Status.ObservedGeneration
	watched := &managementv3.ManagedChart{}
	watched.Namespace, watched.Name = key.Namespace, key.Name
	seen := watchStates(t, watched, &managementv3.ManagedChartList{}, func() string {
		return fmt.Sprintf("%s gen>%v ready=%d", watched.Spec.Version, watched.Status.ObservedGeneration > before, watched.Status.Summary.Ready)
	})
	// The simulated Rancher writes the chart's status meanwhile.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		get(t, key, mc)
		mc.Spec.Version = s.target.HarvesterChart
		return env.Client.Update(ctx, mc)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "Fleet to deploy the chart", func() (bool, string) {
		get(t, key, mc)
		ok, says := clusterupgrade.ChartDeployed(mc, nil, s.target.HarvesterChart, before)
		return ok, says
	})
	want := []string{s.target.HarvesterChart + " gen>true ready=0", s.target.HarvesterChart + " gen>true ready=1"}
	eventually(t, time.Second, "the chart's states to be seen", func() (bool, string) {
		got := seen()
		return containsInOrder(got, want), fmt.Sprintf("the chart went through %v, want %v in order", got, want)
	})
	eventually(t, 5*time.Second, "KubeVirt, Longhorn and Harvester at the release", func() (bool, string) {
		kv := &kubevirtv1.KubeVirt{}
		get(t, types.NamespacedName{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv)
		sv := &harvesterv1beta1.Setting{}
		get(t, types.NamespacedName{Name: cluster.ServerVersionSetting}, sv)
		rel, err := cluster.LatestHelmRelease(ctx, env.Client, cluster.HarvesterNamespace, cluster.HarvesterRelease)
		if err != nil || rel == nil {
			return false, fmt.Sprint(err)
		}
		m, _, _ := clusterupgrade.LonghornImages(rel.Values())
		return kv.Status.ObservedKubeVirtVersion == s.target.KubeVirt && sv.Value == s.target.Harvester && strings.HasSuffix(m, longhornToTag),
			fmt.Sprintf("KubeVirt %s, server-version %s, Longhorn %s", kv.Status.ObservedKubeVirtVersion, sv.Value, m)
	})
}

// TestAddonRedeployment: an enabled add-on whose spec changed goes through
// Harvester's states: InProgress while still AddonDeploySuccessful, then
// AddonUpdating, then AddonDeploySuccessful with Completed.
func TestAddonRedeployment(t *testing.T) {
	start(t, Config{Nodes: 1, Timing: Timing{ChartDeploy: 200 * time.Millisecond}})
	ctx := t.Context()
	key := types.NamespacedName{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon}
	a := &harvesterv1beta1.Addon{}
	eventually(t, 5*time.Second, "the add-on controller to know the add-on", func() (bool, string) {
		get(t, key, a)
		return a.Annotations[annotationDeployedSpec] != "", ""
	})
	watched := &harvesterv1beta1.Addon{}
	watched.Namespace, watched.Name = key.Namespace, key.Name
	seen := watchStates(t, watched, &harvesterv1beta1.AddonList{}, func() string {
		return fmt.Sprintf("%s inProgress=%v completed=%v", watched.Status.Status,
			common.IsTrue(watched.Status.Conditions, cluster.AddonConditionInProgress), common.IsTrue(watched.Status.Conditions, cluster.AddonConditionCompleted))
	})
	since := time.Now().Truncate(time.Second)
	a.Spec.Version = "108.0.2+up77.9.1-rancher.11"
	if err := env.Client.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "Harvester to redeploy the add-on", func() (bool, string) {
		get(t, key, a)
		done, _, says := clusterupgrade.AddonRedeployed(a, since)
		return done, says
	})
	want := []string{
		"AddonDeploySuccessful inProgress=true completed=false",
		"AddonUpdating inProgress=true completed=false",
		"AddonDeploySuccessful inProgress=false completed=true",
	}
	eventually(t, time.Second, "the add-on's states to be seen", func() (bool, string) {
		got := seen()
		return containsInOrder(got, want), fmt.Sprintf("the add-on went through %v, want %v in order", got, want)
	})
}

// TestRancherChartUpgrade: the stand-in for Helm returns once Rancher's
// Deployment rolled out; the new Rancher then reports its version, brings
// Fleet and its webhook at the release's versions, recreates what it owns,
// and re-provisions the CAPI Cluster for a while.
func TestRancherChartUpgrade(t *testing.T) {
	// The node has the new release's images, as after the image preload.
	s := start(t, Config{Nodes: 1, Timing: Timing{DrainStep: 200 * time.Millisecond}, NodeImages: releasetest.New().CurrentImages()})
	ctx := t.Context()
	repo := &catalogv1.ClusterRepo{}
	repo.Name = cluster.RancherChartsRepo
	if err := env.Client.Delete(ctx, repo); err != nil {
		t.Fatal(err)
	}
	if err := (RancherChart{s: s}).Upgrade(ctx, s.target, clusterupgrade.RancherOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the new Rancher", func() (bool, string) {
		sv := &managementv3.Setting{}
		get(t, types.NamespacedName{Name: cluster.RancherServerVersionSetting}, sv)
		fleet, err := cluster.LatestHelmRelease(ctx, env.Client, cluster.FleetSystemNamespace, cluster.FleetRelease)
		if err != nil || fleet == nil {
			return false, fmt.Sprint(err)
		}
		recreated := env.Client.Get(ctx, client.ObjectKeyFromObject(repo), &catalogv1.ClusterRepo{}) == nil
		ok, says := clusterupgrade.HelmReleaseAt(fleet, "fleet-"+s.target.RancherDependencies.Fleet.Chart, s.target.RancherDependencies.Fleet.App)
		return sv.Value == s.target.Rancher && ok && recreated, fmt.Sprintf("server-version %s, fleet %s, %s recreated %v", sv.Value, says, repo.Name, recreated)
	})
	capi := &capiv1beta1.Cluster{}
	eventually(t, 5*time.Second, "the CAPI Cluster to settle again", func() (bool, string) {
		get(t, types.NamespacedName{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, capi)
		return clusterupgrade.CAPIClusterSettled(capi)
	})
	cm := &corev1.ConfigMap{}
	get(t, types.NamespacedName{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerConfigMap}, cm)
	if strings.Contains(cm.Data[cluster.FleetControllerConfigKey], "apiServerURL") {
		t.Errorf("the new Fleet kept apiServerURL: %q", cm.Data[cluster.FleetControllerConfigKey])
	}
	// Fleet redeploys its agent when asked.
	fc := &fleetv1alpha1.Cluster{}
	get(t, types.NamespacedName{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, fc)
	fc.Spec.RedeployAgentGeneration = 2
	if err := env.Client.Update(ctx, fc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "Fleet's new agent", func() (bool, string) {
		get(t, types.NamespacedName{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, fc)
		return ptr.Deref(fc.Status.AgentDeployedGeneration, 0) == 2, fmt.Sprint(fc.Status.AgentDeployedGeneration)
	})
}

// containsInOrder reports whether want occurs in got in order.
func containsInOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}
