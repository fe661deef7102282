package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	// SIM_TEST_LOG=1 shows what the actors do.
	if os.Getenv("SIM_TEST_LOG") != "" {
		logf.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		logf.SetLogger(logr.Discard())
	}
	os.Exit(testenv.RunMainWith(m, &env, WorldOptions()))
}

// start runs a simulator for one test on a fresh cluster and wipes the
// cluster when the test ends. Tests using it must not run in parallel.
func start(t *testing.T, cfg Config) *Sim {
	t.Helper()
	if !cfg.NoKubelet {
		if _, err := KubeletAddress(); errors.Is(err, ErrNoGlobalUnicastAddress) {
			cfg.NoKubelet = true
		}
	}
	s, err := Start(context.Background(), env.Config, cfg)
	if err != nil {
		t.Fatalf("starting the simulator: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the simulator: %v", err)
		}
		wipe(t)
	})
	return s
}

// wipe deletes everything a test or the simulator created, finalizers
// removed first so that nothing waits on a controller.
func wipe(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	lists := []client.ObjectList{
		&v1beta1.UpgradePlanList{}, &corev1.NodeList{}, &harvesterv1beta1.SettingList{}, &harvesterv1beta1.VersionList{},
		&harvesterv1beta1.VirtualMachineImageList{}, &harvesterv1beta1.AddonList{}, &capiv1beta1.MachineList{},
		&provisioningv1.ClusterList{}, &managementv3.ManagedChartList{}, &upgradev1.PlanList{},
		&kubevirtv1.KubeVirtList{}, &kubevirtv1.VirtualMachineList{}, &kubevirtv1.VirtualMachineInstanceList{},
		&kubevirtv1.VirtualMachineInstanceMigrationList{}, &longhornv1beta2.SettingList{}, &longhornv1beta2.VolumeList{}, &longhornv1beta2.EngineList{}, &longhornv1beta2.ReplicaList{},
		&batchv1.JobList{}, &appsv1.DeploymentList{}, &corev1.ServiceList{}, &discoveryv1.EndpointSliceList{},
		&corev1.PersistentVolumeClaimList{}, &corev1.PersistentVolumeList{}, &corev1.PodList{}, &corev1.ConfigMapList{}, &corev1.SecretList{},
		&corev1.ServiceAccountList{}, &storagev1.StorageClassList{},
		&managementv3.SettingList{}, &managementv3.ClusterList{}, &capiv1beta1.ClusterList{}, &fleetv1alpha1.ClusterList{},
		&fleetv1alpha1.BundleList{}, &catalogv1.ClusterRepoList{}, &longhornv1beta2.NodeList{}, &longhornv1beta2.InstanceManagerList{},
		&appsv1.DaemonSetList{}, &networkingv1.IngressList{}, &networkingv1.IngressClassList{},
	}
	for _, list := range lists {
		if err := c.List(ctx, list); err != nil {
			t.Fatalf("wipe: %v", err)
		}
		items, err := metaItems(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range items {
			if o.GetNamespace() == "default" && (o.GetName() == "kubernetes" || o.GetLabels()[discoveryv1.LabelServiceName] == "kubernetes") ||
				o.GetName() == "default" || strings.HasPrefix(o.GetName(), "kube-root-ca") {
				continue
			}
			// The real controllers keep changing what they manage.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil || len(o.GetFinalizers()) == 0 {
					return err
				}
				o.SetFinalizers(nil)
				return c.Update(ctx, o)
			})
			if client.IgnoreNotFound(err) != nil {
				t.Fatalf("wipe: removing finalizers of %T %s: %v", o, client.ObjectKeyFromObject(o), err)
			}
			if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground), client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				t.Fatalf("wipe: deleting %T %s: %v", o, client.ObjectKeyFromObject(o), err)
			}
		}
	}
	// The next test bootstraps a fresh cluster: wait until the nodes, their
	// pods and the objects the simulator creates are gone.
	eventually(t, 30*time.Second, "the cluster to be wiped", func() (bool, string) {
		for _, list := range []client.ObjectList{&corev1.NodeList{}, &corev1.PodList{}, &corev1.SecretList{}, &capiv1beta1.MachineList{}} {
			if err := c.List(ctx, list, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
				return false, err.Error()
			}
			if _, isNodes := list.(*corev1.NodeList); isNodes {
				if err := c.List(ctx, list); err != nil {
					return false, err.Error()
				}
			}
			if n := meta.LenList(list); n > 0 {
				return false, fmt.Sprintf("%d %T left", n, list)
			}
		}
		return true, ""
	})
}

// eventually polls cond until it holds or the timeout passes, then fails
// with what cond last reported.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if msg != "" {
			last = msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agentPassed waits until the node agent has run a whole pass over node
// that began after this call (testenv.WholePass), touching the node so that
// passes come.
func agentPassed(t *testing.T, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	patch := func() error {
		return env.Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test/touched":"`+time.Now().String()+`"}}}`)))
	}
	if _, err := testenv.WholePass(ctx, nodeAgentName, patch); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, key client.ObjectKey, obj client.Object) {
	t.Helper()
	if err := env.Client.Get(context.Background(), key, obj); err != nil {
		t.Fatalf("getting %T %s: %v", obj, key, err)
	}
}

// createPlan creates an UpgradePlan the way the toolkit leaves it once
// MetadataPopulate is done, so that jobs find their release metadata.
func createPlan(t *testing.T, name string, cfg Config) *v1beta1.UpgradePlan {
	t.Helper()
	ctx := context.Background()
	cfg.setDefaults()
	p := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1beta1.UpgradePlanSpec{Version: ptr.To(cfg.To.Harvester), RestoreVM: ptr.To(true)},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("creating UpgradePlan: %v", err)
	}
	rm := cfg.To
	p.Status.CurrentPhase = v1beta1.PhaseNodeUpgrading
	p.Status.ReleaseMetadata = &rm
	p.Status.PreviousVersion = ptr.To(cfg.From.Harvester)
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatalf("writing UpgradePlan status: %v", err)
	}
	return p
}

// nodeJob creates a node Job as the toolkit does (labels from the contract).
func nodeJob(t *testing.T, plan, jobType, node string, suspend bool) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.HarvesterNamespace, Name: plan + "-node-upgrade-" + jobType + "-" + node,
			Labels: map[string]string{
				v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentNodeUpgrade,
				v1beta1.LabelJobType: jobType, v1beta1.LabelNode: node,
			},
		},
		Spec: batchv1.JobSpec{
			Suspend:      ptr.To(suspend),
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
				v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentNodeUpgrade,
				v1beta1.LabelJobType: jobType, v1beta1.LabelNode: node,
			}}, Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Affinity: cluster.OnNode(node), ServiceAccountName: harvesterServiceAccount,
				Tolerations: cluster.UpgradeTolerations(),
				Containers: []corev1.Container{{
					Name: "apply", Image: "rancher/harvester-upgrade-toolkit:v1.7.1", Command: []string{"upgrade-toolkit", "node", jobType},
					Env: []corev1.EnvVar{
						{Name: "HARVESTER_UPGRADEPLAN_NAME", Value: plan}, {Name: "HARVESTER_UPGRADE_NODE_NAME", Value: node},
						{Name: "HARVESTER_UPGRADE_POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					},
				}},
			}},
		},
	}
	if err := env.Client.Create(context.Background(), job); err != nil {
		t.Fatalf("creating Job: %v", err)
	}
	return job
}

// waitJob waits until the Job has the condition and returns it.
func waitJob(t *testing.T, job *batchv1.Job, cond batchv1.JobConditionType) *batchv1.Job {
	t.Helper()
	got := &batchv1.Job{}
	eventually(t, 20*time.Second, "job "+job.Name+" "+string(cond), func() (bool, string) {
		get(t, client.ObjectKeyFromObject(job), got)
		return jobCondition(got, cond), fmtConds(got)
	})
	return got
}

func fmtConds(job *batchv1.Job) string {
	s := ""
	for _, c := range job.Status.Conditions {
		s += string(c.Type) + "=" + string(c.Status) + "(" + c.Reason + ") "
	}
	return s
}

func handlerFuncs(f func(any)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, obj any) { f(obj) }}
}
