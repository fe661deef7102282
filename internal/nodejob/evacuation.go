package nodejob

import (
	"context"
	"fmt"
	"sort"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// waitVMsGone waits until no instance runs on the node. With evacuate, it
// names each instance's migrations while KubeVirt evacuates the node; it
// never stops a VM whose migration fails: the manager names the VM, holds
// the node past the migration deadline and lets the operator choose (try
// again, or shut it down with consent), and this wait fails the Job at its
// end, saying the same.
func (j *Job) waitVMsGone(evacuate bool) func(context.Context, *state) error {
	return func(ctx context.Context, _ *state) error {
		what := "every VM to leave node " + j.Node
		hint := "stop or migrate the VMs named above by hand, then let the job retry"
		if evacuate {
			what = "KubeVirt to live-migrate every VM away from node " + j.Node
			hint = fmt.Sprintf("the VMs named above did not move (kubectl get vmim -A); for each, choose: try its migration again "+
				"(kubectl annotate vm NAME -n NAMESPACE %s=\"$(date +%%s)\" --overwrite), or shut it down now and start it after the node's upgrade "+
				"(kubectl annotate vm NAME -n NAMESPACE %s=%s); then retry the plan", v1beta1.AnnotationRetryMigration, v1beta1.AnnotationShutdownForUpgrade, j.Plan)
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
				if i == listShown {
					break
				}
				note := vmi.Status.Phase
				if evacuate {
					m, err := j.describeMigrations(ctx, vmi)
					if err != nil {
						return false, "", err
					}
					note += m
				}
				shown = append(shown, fmt.Sprintf("%s/%s (%s)", vmi.Namespace, vmi.Name, note))
			}
			return false, fmt.Sprintf("%d left: %s", len(left), strings.Join(shown, ", ")), nil
		})
	}
}

// describeMigrations tells how an instance's evacuation goes: its latest
// migration and phase, and the failed ones with the last reason.
func (j *Job) describeMigrations(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := j.Client.List(ctx, &migs, client.InNamespace(vmi.Namespace), client.MatchingLabels{cluster.LabelMigrationVMIName: vmi.Name}); err != nil {
		return "", err
	}
	var latest *kubevirtv1.VirtualMachineInstanceMigration
	failed, reason := 0, ""
	for i := range migs.Items {
		m := &migs.Items[i]
		if m.Spec.VMIName != vmi.Name {
			continue
		}
		if latest == nil || latest.CreationTimestamp.Before(&m.CreationTimestamp) {
			latest = m
		}
		if m.Status.Phase == cluster.MigrationPhaseFailed {
			failed++
			if st := m.Status.MigrationState; st != nil && st.FailureReason != "" {
				reason = st.FailureReason
			}
		}
	}
	var out string
	if latest != nil {
		out = fmt.Sprintf(", migration %s %s", latest.Name, latest.Status.Phase)
	}
	if failed > 0 {
		out += fmt.Sprintf(", %d failed migration(s)", failed)
		if reason != "" {
			out += ", last: " + reason
		}
	}
	return out, nil
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
