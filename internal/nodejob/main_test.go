package nodejob_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/host/hosttest"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/nodejob"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(testenv.RunMain(m, &env))
}

// repoServer serves the default release repo.
func repoServer(t *testing.T) (*releasetest.Repo, string) {
	repo := releasetest.New()
	srv := httptest.NewServer(releasetest.Handler(repo.Files()))
	t.Cleanup(srv.Close)
	return repo, srv.URL + release.RepoRoot
}

// node returns a host that runs the previous release, whose containerd
// learns the images of each archive it imports.
func fakeHost(repo *releasetest.Repo, tl *jobtest.Timeline) *hosttest.Fake {
	f := &hosttest.Fake{PrettyName: "Harvester v1.7.1", CPUs: 8, ArchiveImages: map[string][]string{}}
	for _, a := range slices.Concat(repo.Bundle.Images.Common, repo.Bundle.Images.RKE2, repo.Bundle.Images.Agent) {
		f.ArchiveImages[path.Base(a.Archive)] = repo.Lists[a.List]
	}
	if tl != nil {
		f.Observe = func(op string) { tl.Add("host " + op) }
	}
	return f
}

func fastTimeouts() nodejob.Timeouts {
	return nodejob.Timeouts{Repo: 10 * time.Second, Longhorn: 10 * time.Second, Evacuation: 10 * time.Second,
		PDB: 10 * time.Second, Kubelet: 10 * time.Second, Bundles: 10 * time.Second, Interval: 20 * time.Millisecond}
}

// background runs fn every few milliseconds until the test ends.
func background(t *testing.T, fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fn(ctx)
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// fakeKubeVirt plays KubeVirt for the VMs on one node: an instance of a
// halted VM goes away; on a node tainted kubevirt.io/drain, each instance
// KubeVirt can move gets an evacuation migration and moves to target,
// except those in fail, whose migration fails with a FailedMigration
// warning. Once the node is empty, the evacuation PDBs go.
func fakeKubeVirt(c client.Client, node, target, pdbNamespace string, fail map[string]bool) func(ctx context.Context) {
	return func(ctx context.Context) {
		n := &corev1.Node{}
		if c.Get(ctx, client.ObjectKey{Name: node}, n) != nil {
			return
		}
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cluster.TaintKubeVirtDrain })
		var vmis kubevirtv1.VirtualMachineInstanceList
		if c.List(ctx, &vmis, client.MatchingLabels{cluster.LabelVMINodeName: node}) != nil {
			return
		}
		for i := range vmis.Items {
			vmi := &vmis.Items[i]
			vm := &kubevirtv1.VirtualMachine{}
			if c.Get(ctx, client.ObjectKeyFromObject(vmi), vm) != nil {
				continue
			}
			if ptr.Deref(vm.Spec.RunStrategy, "") == cluster.RunStrategyHalted {
				_ = c.Delete(ctx, vmi)
				continue
			}
			if !tainted || len(vmi.Spec.NodeSelector) > 0 || len(vmi.Spec.Domain.Devices.HostDevices) > 0 {
				continue
			}
			mig := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{
				Namespace: vmi.Namespace, Name: cluster.EvacuationMigrationPrefix + vmi.Name,
				Labels: map[string]string{cluster.LabelMigrationVMIName: vmi.Name},
			}, Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name}}
			if err := c.Create(ctx, mig); err != nil && !apierrors.IsAlreadyExists(err) {
				continue
			}
			_ = c.Get(ctx, client.ObjectKeyFromObject(mig), mig)
			if fail[vmi.Name] {
				if mig.Status.Phase != cluster.MigrationPhaseFailed {
					mig.Status.Phase = cluster.MigrationPhaseFailed
					mig.Status.MigrationState = &kubevirtv1.MigrationState{Failed: true, FailureReason: "source migration failed: volume is ReadWriteOnce"}
					_ = c.Status().Update(ctx, mig)
					_ = c.Create(ctx, &corev1.Event{
						ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: mig.Name + ".failed"},
						InvolvedObject: corev1.ObjectReference{Kind: "VirtualMachineInstanceMigration", Namespace: vmi.Namespace, Name: mig.Name,
							APIVersion: kubevirtv1.GroupVersion.String()},
						Type: corev1.EventTypeWarning, Reason: cluster.EventFailedMigration,
						Message: "source migration failed: volume is ReadWriteOnce",
					})
				}
				continue
			}
			mig.Status.Phase = "Succeeded"
			_ = c.Status().Update(ctx, mig)
			vmi.Labels[cluster.LabelVMINodeName] = target
			if c.Update(ctx, vmi) == nil {
				vmi.Status.NodeName = target
				_ = c.Status().Update(ctx, vmi)
			}
		}
		if len(vmis.Items) == 0 && tainted {
			_ = c.DeleteAllOf(ctx, &policyv1.PodDisruptionBudget{}, client.InNamespace(pdbNamespace))
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
