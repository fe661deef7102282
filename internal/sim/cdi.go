package sim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
)

// The simulated image controller imports a VirtualMachineImage with the CDI
// backend as Harvester's does: Initialized, then Imported=Unknown (Importing)
// with rising progress, then Imported=True at 100%, and the PVC of the same
// name that CDI fills. A failing import counts failed attempts; past
// spec.retry it sets RetryLimitExceeded=True and Imported=False with the
// importer's error.

// isoVirtualSize is the size the simulated ISO reports.
const isoVirtualSize = 6 * gib

// importProgressStep is how far the import moves per Timing.ImportStep.
const importProgressStep = 25

func (s *Sim) setupCDI(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-cdi-importer").
		For(&harvesterv1beta1.VirtualMachineImage{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		Complete(reconcile.Func(s.reconcileImage))
}

func (s *Sim) reconcileImage(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	img := &harvesterv1beta1.VirtualMachineImage{}
	if err := s.c.Get(ctx, req.NamespacedName, img); err != nil {
		// The real garbage collector deletes a deleted image's PVC.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if img.Spec.Backend != "cdi" || img.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	st := &img.Status
	switch {
	case !common.IsTrue(st.Conditions, condImageInitialized):
		st.AppliedURL = img.Spec.URL
		st.Size, st.VirtualSize = isoVirtualSize, isoVirtualSize
		st.StorageClassName, st.TargetStorageClassName = img.Spec.TargetStorageClassName, img.Spec.TargetStorageClassName
		st.Progress = 0
		setImageCondition(st, condImageInitialized, "True", "Initialized", "")
		setImageCondition(st, condImageImported, "Unknown", "Importing", "")
		if err := s.ensureImagePVC(ctx, img); err != nil {
			return reconcile.Result{}, err
		}
	case common.IsTrue(st.Conditions, condImageImported) || common.IsTrue(st.Conditions, condImageRetryLimit):
		return reconcile.Result{}, nil
	default:
		step := "import/" + string(img.UID)
		if wait := s.steps.remaining(step, s.cfg.Timing.ImportStep); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		s.steps.forget(step)
		if f := s.faults.importFault(img.Namespace, img.Name); f != nil {
			failImport(img, f.Message)
		} else if st.Progress+importProgressStep < 100 {
			st.Progress += importProgressStep
			setImageCondition(st, condImageImported, "Unknown", "Importing", "Image Importing")
		} else {
			st.Progress = 100
			setImageCondition(st, condImageImported, "True", "Imported", "")
			setImageCondition(st, condImageRetryLimit, "False", "", "")
		}
	}
	return reconcile.Result{}, cluster.UpdateStatus(ctx, s.c, img)
}

// failImport records one failed import attempt the way Harvester's image
// controller does.
func failImport(img *harvesterv1beta1.VirtualMachineImage, message string) {
	if message == "" {
		message = defaultImportFailMessage
	}
	st := &img.Status
	st.Failed++
	msg := "failed due to error: " + message
	if st.Failed > 1 {
		msg = fmt.Sprintf("retry attempted %d/%d %s", st.Failed-1, img.Spec.Retry, msg)
	}
	if st.Failed > img.Spec.Retry {
		setImageCondition(st, condImageRetryLimit, "True", "", msg)
		setImageCondition(st, condImageImported, "False", "", msg)
		return
	}
	setImageCondition(st, condImageRetryLimit, "False", "", msg)
}

func setImageCondition(st *harvesterv1beta1.VirtualMachineImageStatus, t, status, reason, message string) {
	now := wranglerNow()
	c := common.Condition{Type: t, Status: status, Reason: reason, Message: message, LastUpdateTime: now}
	if old := common.FindCondition(st.Conditions, t); old == nil || old.Status != status {
		c.LastTransitionTime = now
	}
	common.SetCondition(&st.Conditions, c)
}

// ensureImagePVC creates the PVC CDI imports into: same name and namespace
// as the image, block mode, the image's storage class and virtual size. It is
// owned by the image (in Harvester through the image's DataVolume) and bound
// at once.
func (s *Sim) ensureImagePVC(ctx context.Context, img *harvesterv1beta1.VirtualMachineImage) error {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: img.Namespace, Name: img.Name,
			Labels: map[string]string{"app": "containerized-data-importer", "app.kubernetes.io/component": "storage"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: harvesterv1beta1.GroupVersion.String(), Kind: "VirtualMachineImage", Name: img.Name, UID: img.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(img.Spec.TargetStorageClassName),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(isoVirtualSize, resource.BinarySI),
			}},
			VolumeName: "pvc-" + string(img.UID),
		},
	}
	if err := s.c.Create(ctx, pvc); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("creating the PVC of image %s/%s: %w", img.Namespace, img.Name, err)
	}
	// Longhorn's CSI provisioner provisions the volume the claim names; the
	// real persistent-volume controller binds them, and the scheduler places
	// a pod using the claim only once it is bound.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": longhornCSIDriver}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      pvc.Spec.Resources.Requests,
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: longhornCSIDriver, VolumeHandle: pvc.Spec.VolumeName,
			}},
		},
	}
	if err := s.c.Create(ctx, pv); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating the volume of image %s/%s: %w", img.Namespace, img.Name, err)
	}
	return nil
}

// longhornCSIDriver is the CSI driver of Longhorn's volumes.
const longhornCSIDriver = "driver.longhorn.io"
