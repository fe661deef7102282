package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
)

// isoImage is the VirtualMachineImage the toolkit's ISODownload phase creates.
func isoImage(t *testing.T, plan string) *harvesterv1beta1.VirtualMachineImage {
	t.Helper()
	img := &harvesterv1beta1.VirtualMachineImage{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.HarvesterNamespace, Name: plan + "-iso",
			Annotations: map[string]string{cluster.AnnotationOSUpgradeImage: "True"},
			Labels:      map[string]string{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentISO},
		},
		Spec: harvesterv1beta1.VirtualMachineImageSpec{
			DisplayName: plan + "-v1.8.0", SourceType: "download", Backend: "cdi", Retry: 3,
			URL: "https://releases.rancher.com/harvester/v1.8.0/harvester-v1.8.0-amd64.iso", TargetStorageClassName: cluster.LonghornStaticStorageClass,
		},
	}
	if err := env.Client.Create(context.Background(), img); err != nil {
		t.Fatal(err)
	}
	return img
}

func TestCDIImport(t *testing.T) {
	start(t, Config{Nodes: 1, Timing: Timing{ImportStep: 50 * time.Millisecond}})
	img := isoImage(t, "up1")
	got := &harvesterv1beta1.VirtualMachineImage{}
	progress := map[int]bool{}
	eventually(t, 10*time.Second, "the import to finish", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(img), got)
		progress[got.Status.Progress] = true
		return common.IsTrue(got.Status.Conditions, condImageImported), ""
	})
	if got.Status.Progress != 100 || !common.IsTrue(got.Status.Conditions, condImageInitialized) || got.Status.AppliedURL != img.Spec.URL {
		t.Errorf("imported image status %+v", got.Status)
	}
	if len(progress) < 3 {
		t.Errorf("saw progress %v: the import should report intermediate progress", progress)
	}
	// The real persistent-volume controller binds the claim to the volume
	// Longhorn provisioned.
	pvc := &corev1.PersistentVolumeClaim{}
	eventually(t, 30*time.Second, "the PVC to be bound", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(img), pvc)
		return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase)
	})
	if *pvc.Spec.StorageClassName != cluster.LonghornStaticStorageClass || *pvc.Spec.VolumeMode != corev1.PersistentVolumeBlock {
		t.Errorf("pvc %+v %+v", pvc.Spec, pvc.Status)
	}

	// Deleting the image deletes its PVC: the real garbage collector.
	if err := env.Client.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the PVC to go", func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(img), &corev1.PersistentVolumeClaim{})
		return client.IgnoreNotFound(err) == nil && err != nil, ""
	})
}

func TestCDIImportFails(t *testing.T) {
	start(t, Config{Nodes: 1, Faults: FaultSet{FailImport: &ImportFault{Message: "connection reset by peer"}}})
	img := isoImage(t, "up2")
	got := &harvesterv1beta1.VirtualMachineImage{}
	eventually(t, 10*time.Second, "the import to fail", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(img), got)
		return common.IsFalse(got.Status.Conditions, condImageImported), ""
	})
	imported := common.FindCondition(got.Status.Conditions, condImageImported)
	if !common.IsTrue(got.Status.Conditions, condImageRetryLimit) || got.Status.Failed != 4 ||
		imported.Message != "retry attempted 3/3 failed due to error: connection reset by peer" {
		t.Errorf("failed import: failed=%d conditions %+v", got.Status.Failed, got.Status.Conditions)
	}
	if !strings.Contains(common.FindCondition(got.Status.Conditions, condImageRetryLimit).Message, "connection reset by peer") {
		t.Errorf("RetryLimitExceeded does not carry the importer's error: %+v", got.Status.Conditions)
	}
}
