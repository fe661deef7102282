package nodejob

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// refuseStuckVMs fails at once when a VM on the node can neither
// live-migrate nor be stopped by the upgrade, before any VM is stopped:
// waiting would only run out the evacuation deadline.
func (j *Job) refuseStuckVMs(ctx context.Context, _ *state) error {
	found, err := j.detector().Detect(ctx, j.Node)
	if err != nil {
		return err
	}
	return found.CannotLeave(j.Node)
}

// shutDownNonMigratable records the node's VMs that cannot live-migrate in
// the plan's restore list and stops them (vm-live-migrate-detector
// --shutdown).
func (j *Job) shutDownNonMigratable(ctx context.Context, _ *state) error {
	_, err := j.detector().Shutdown(ctx, j.Plan, j.Node)
	return err
}

func (j *Job) detector() *helper.Detector {
	return &helper.Detector{Client: j.Client, Power: j.Power,
		Events: &helper.Recorder{Client: j.Client, Component: helper.ComponentDetector, Host: j.Node}}
}

// remainingVMIs are the instances still on the node: everything not in a
// final phase.
func remainingVMIs(vmis []kubevirtv1.VirtualMachineInstance) []*kubevirtv1.VirtualMachineInstance {
	var out []*kubevirtv1.VirtualMachineInstance
	for i := range vmis {
		if p := vmis[i].Status.Phase; p != cluster.VMIPhaseSucceeded && p != cluster.VMIPhaseFailed {
			out = append(out, &vmis[i])
		}
	}
	sort.Slice(out, func(a, b int) bool {
		return client.ObjectKeyFromObject(out[a]).String() < client.ObjectKeyFromObject(out[b]).String()
	})
	return out
}

// listShown is how many instances a status names.
const listShown = 10

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances;virtualmachineinstancemigrations,verbs=list
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// waitVMsGone waits until no instance runs on the node. With evacuate, an
// instance whose evacuation migration failed (KubeVirt recorded a
// FailedMigration warning) is stopped, and recorded for restore like the
// ones the detector stopped, instead of blocking the drain.
func (j *Job) waitVMsGone(evacuate bool) func(context.Context, *state) error {
	return func(ctx context.Context, s *state) error {
		what := "every VM to leave node " + j.Node
		hint := "stop or migrate the VMs named above by hand, then let the job retry"
		if evacuate {
			what = "KubeVirt to live-migrate every VM away from node " + j.Node
			hint = "check the VMs' migrations (kubectl get vmim -A); migrate or stop the VMs named above by hand, then let the job retry"
		}
		w := waitfor.Wait{What: what, Timeout: j.Timeouts.Evacuation, Interval: j.Timeouts.Interval, Hint: hint}
		return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
			var vmis kubevirtv1.VirtualMachineInstanceList
			if err := j.Client.List(ctx, &vmis, client.MatchingLabels{cluster.LabelVMINodeName: j.Node}); err != nil {
				return false, "", err
			}
			left := remainingVMIs(vmis.Items)
			if len(left) == 0 {
				return true, "", nil
			}
			var shown []string
			for i, vmi := range left {
				note := vmi.Status.Phase
				if evacuate {
					m, err := j.handleMigrations(ctx, s, vmi)
					if err != nil {
						return false, "", err
					}
					if m != "" {
						note += ", " + m
					}
				}
				if i < listShown {
					shown = append(shown, fmt.Sprintf("%s/%s (%s)", vmi.Namespace, vmi.Name, note))
				}
			}
			return false, fmt.Sprintf("%d left: %s", len(left), strings.Join(shown, ", ")), nil
		})
	}
}

// handleMigrations looks at the instance's evacuation migrations, stops the
// VM when one failed, and describes them.
func (j *Job) handleMigrations(ctx context.Context, s *state, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := j.Client.List(ctx, &migs, client.InNamespace(vmi.Namespace), client.MatchingLabels{cluster.LabelMigrationVMIName: vmi.Name}); err != nil {
		return "", err
	}
	var notes []string
	for i := range migs.Items {
		m := &migs.Items[i]
		if !strings.HasPrefix(m.Name, cluster.EvacuationMigrationPrefix) || m.Spec.VMIName != vmi.Name {
			continue
		}
		notes = append(notes, fmt.Sprintf("migration %s %s", m.Name, m.Status.Phase))
		if m.Status.Phase != cluster.MigrationPhaseFailed {
			continue
		}
		reason, err := failedMigrationEvent(ctx, j.Client, m)
		if err != nil {
			return "", err
		}
		if reason == "" {
			continue // not KubeVirt's evacuation failure; another migration may be
		}
		if err := j.stopAfterFailedMigration(ctx, s, vmi, m.Name, reason); err != nil {
			return "", err
		}
		notes = append(notes, "stopped: its live migration failed")
	}
	return strings.Join(notes, ", "), nil
}

// failedMigrationEvent returns the message of KubeVirt's FailedMigration
// warning on the migration, "" when there is none: a Failed phase alone may
// still be retried by KubeVirt.
func failedMigrationEvent(ctx context.Context, c client.Reader, m *kubevirtv1.VirtualMachineInstanceMigration) (string, error) {
	var events corev1.EventList
	err := c.List(ctx, &events, client.InNamespace(m.Namespace), client.MatchingFields{
		"involvedObject.kind": "VirtualMachineInstanceMigration",
		"involvedObject.name": m.Name,
		"type":                corev1.EventTypeWarning,
		"reason":              cluster.EventFailedMigration,
	})
	if err != nil {
		return "", fmt.Errorf("reading the events of migration %s/%s: %w", m.Namespace, m.Name, err)
	}
	if len(events.Items) == 0 {
		return "", nil
	}
	return orDefault(events.Items[0].Message, cluster.EventFailedMigration), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// stopAfterFailedMigration records the VM for restore, then stops it.
func (j *Job) stopAfterFailedMigration(ctx context.Context, s *state, vmi *kubevirtv1.VirtualMachineInstance, migration, reason string) error {
	if s.plan == nil {
		if err := j.readPlan(ctx, s); err != nil {
			return err
		}
	}
	vm := types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name}
	if s.stopped[vm] {
		return nil
	}
	if _, err := helper.RecordVMs(ctx, j.Client, s.plan, j.Node, []types.NamespacedName{vm}); err != nil {
		return err
	}
	if err := j.Power.Stop(ctx, vm); err != nil {
		return err
	}
	if s.stopped == nil {
		s.stopped = map[types.NamespacedName]bool{}
	}
	s.stopped[vm] = true
	log.FromContext(ctx).Info("stopped a VM whose evacuation failed", "vm", vm.String(), "migration", migration, "reason", reason)
	j.detector().Events.Event(ctx, s.plan, corev1.EventTypeNormal, v1beta1.EventVMShutdownCompleted,
		"Shut down VM %s on node %s because its live migration %s failed (%s); it is recorded for restore", vm, j.Node, migration, reason)
	return nil
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list

// waitEvacuationPDBs waits until KubeVirt removed the PodDisruptionBudgets
// of its evacuation migrations, which would make Rancher's drain fail.
func (j *Job) waitEvacuationPDBs(ctx context.Context, _ *state) error {
	w := waitfor.Wait{
		What:     "KubeVirt's evacuation PodDisruptionBudgets to be removed",
		Timeout:  j.Timeouts.PDB,
		Interval: j.Timeouts.Interval,
		Hint:     "they block the drain: check the migrations they belong to (kubectl get vmim -A)",
	}
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		var pdbs policyv1.PodDisruptionBudgetList
		if err := j.Client.List(ctx, &pdbs); err != nil {
			return false, "", err
		}
		var left []string
		for _, p := range pdbs.Items {
			if strings.HasPrefix(p.Name, cluster.EvacuationPDBPrefix) {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		sort.Strings(left)
		return len(left) == 0, "left: " + strings.Join(left, ", "), nil
	})
}
