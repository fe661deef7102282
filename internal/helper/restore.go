package helper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// ErrVMRestore is matched (errors.Is) by the error of a restore that could
// not start every recorded VM.
var ErrVMRestore = errors.New("some VMs could not be started")

// Defaults of a Restorer.
const (
	// DefaultKubeVirtTimeout is how long restore-vm waits for KubeVirt to be
	// healthy after the node's upgrade.
	DefaultKubeVirtTimeout = 30 * time.Minute
	// DefaultPollInterval is the time between two checks of a wait.
	DefaultPollInterval = 5 * time.Second
)

// Restorer starts the VMs the detector shut down for a node's upgrade.
type Restorer struct {
	Client client.Client
	Power  VMPower
	Events *Recorder
	// KubeVirtTimeout bounds the wait for KubeVirt (DefaultKubeVirtTimeout
	// when zero); Interval is the time between two checks
	// (DefaultPollInterval when zero).
	KubeVirtTimeout, Interval time.Duration
}

// RestoreResult is what a restore did.
type RestoreResult struct {
	Recorded, Started, Failed, Gone []string
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=get

// Restore waits until KubeVirt is healthy, then starts exactly the VMs the
// plan's restore list records for the node (without spec.restoreVM, only
// those the operator let the upgrade shut down: annotation
// shutdown-for-upgrade naming the plan), and records RestoreVMCompleted
// (and RestoreVMFailed when a VM could not be started) on the plan. VMs
// deleted since are reported, not failed. A VM that could not be started
// makes it fail with ErrVMRestore, after it tried every VM.
func (r *Restorer) Restore(ctx context.Context, planName, node string) (RestoreResult, error) {
	plan, err := Plan(ctx, r.Client, planName)
	if err != nil {
		return RestoreResult{}, err
	}
	vms, found, err := RecordedVMs(ctx, r.Client, plan.Name, node)
	if err != nil {
		return RestoreResult{}, err
	}
	if !plan.RestoreVMEnabled() {
		if vms, err = r.consented(ctx, plan.Name, vms); err != nil {
			return RestoreResult{}, err
		}
	}
	var res RestoreResult
	for _, vm := range vms {
		res.Recorded = append(res.Recorded, vm.String())
	}
	if !found || len(vms) == 0 {
		log.FromContext(ctx).Info("no VM was shut down for this node's upgrade: nothing to restore",
			"configMap", cluster.HarvesterNamespace+"/"+names.RestoreVMConfigMap(plan.Name), "node", node)
		return res, nil
	}
	wait := waitfor.Wait{
		What:     "KubeVirt to be healthy before starting the VMs of node " + node,
		Timeout:  orDefault(r.KubeVirtTimeout, DefaultKubeVirtTimeout),
		Interval: orDefault(r.Interval, DefaultPollInterval),
		Hint: fmt.Sprintf("no VM was started; check KubeVirt (kubectl -n %s get kubevirt %s -o yaml), then start %s by hand (virtctl start)",
			cluster.HarvesterNamespace, cluster.KubeVirtName, strings.Join(res.Recorded, ", ")),
	}
	if err := wait.Until(ctx, func(ctx context.Context) (bool, string, error) {
		kv, err := cluster.KubeVirtObject(ctx, r.Client)
		if err != nil {
			return false, "", err
		}
		ready, status := cluster.KubeVirtReady(kv)
		return ready, status, nil
	}); err != nil {
		r.Events.Event(ctx, plan, corev1.EventTypeWarning, v1beta1.EventRestoreVMFailed,
			"Restoring %d VMs for node %s during upgrade %s failed: %v", len(vms), node, plan.Name, err)
		return res, err
	}
	var failures []string
	for _, vm := range vms {
		switch err := r.Power.Start(ctx, vm); {
		case apierrors.IsNotFound(err):
			res.Gone = append(res.Gone, vm.String())
		case err != nil:
			res.Failed = append(res.Failed, vm.String())
			failures = append(failures, err.Error())
		default:
			res.Started = append(res.Started, vm.String())
		}
	}
	msg := fmt.Sprintf("Restored %d VMs for node %s during upgrade %s, success: %d, failed: %d", len(vms), node, plan.Name, len(res.Started), len(res.Failed))
	if len(res.Gone) > 0 {
		msg += fmt.Sprintf(", deleted since: %s", strings.Join(res.Gone, ", "))
	}
	r.Events.Event(ctx, plan, corev1.EventTypeNormal, v1beta1.EventRestoreVMCompleted, "%s", msg)
	if len(res.Failed) > 0 {
		r.Events.Event(ctx, plan, corev1.EventTypeWarning, v1beta1.EventRestoreVMFailed,
			"Starting %d of %d VMs for node %s failed: %s", len(res.Failed), len(vms), node, strings.Join(failures, "; "))
		return res, fmt.Errorf("%w for node %s: %s; start them by hand (virtctl start)", ErrVMRestore, node, strings.Join(failures, "; "))
	}
	return res, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// consented keeps of vms those whose shutdown-for-upgrade annotation names
// the plan: the operator let the upgrade shut them down on the promise that
// they are started again after the node's upgrade.
func (r *Restorer) consented(ctx context.Context, plan string, vms []types.NamespacedName) ([]types.NamespacedName, error) {
	var out []types.NamespacedName
	for _, key := range vms {
		vm := &kubevirtv1.VirtualMachine{}
		if err := r.Client.Get(ctx, key, vm); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading VM %s: %w", key, err)
		}
		if vm.Annotations[v1beta1.AnnotationShutdownForUpgrade] == plan {
			out = append(out, key)
		}
	}
	return out, nil
}
