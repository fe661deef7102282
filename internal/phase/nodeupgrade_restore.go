package phase

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// restoreJobDeadline bounds restore-vm, which waits for KubeVirt 30 minutes
// itself.
const restoreJobDeadline = 35 * 60

// restoreVMs starts, for each node back from its reboot, a Job that restarts
// the VMs shut down for it (with spec.restoreVM, all of them; without, those
// the operator consented to, as the ledger l records), and reports on each
// node how that goes. A slow or failed restore never holds up the next node.
// It returns the nodes whose restore still runs.
func restoreVMs(ctx context.Context, s *Scope, nodes []corev1.Node, obs *observation, l *vmledger.Ledger) ([]string, error) {
	if !s.Plan.RestoreVMEnabled() && l == nil {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	found, err := s.get(ctx, cluster.HarvesterNamespace, names.RestoreVMConfigMap(s.Plan.Name), cm)
	if err != nil || !found {
		return nil, err
	}
	var running []string
	// Without spec.restoreVM only the VMs shut down with consent come back.
	restoreAll := s.Plan.RestoreVMEnabled()
	var consented map[string][]string
	if !restoreAll {
		consented = l.Consented()
	}
	for i := range nodes {
		n := &nodes[i]
		st := s.Plan.Status.NodeUpgradeStatuses[n.Name]
		if !nodestate.Upgraded(st.State) || cluster.IsWitness(n) {
			continue
		}
		vms := cm.Data[n.Name]
		if !restoreAll {
			vms = strings.Join(consented[n.Name], ",")
		}
		if strings.TrimSpace(vms) == "" {
			continue
		}
		j := obs.jobs[jobspec.RestoreVM][n.Name]
		if j == nil {
			job := s.newJob(JobSpec{
				Name:            names.NodeJob(s.Plan.Name, jobspec.RestoreVM, n.Name),
				Component:       v1beta1.ComponentNodeUpgrade,
				Labels:          map[string]string{v1beta1.LabelJobType: jobspec.RestoreVM, v1beta1.LabelNode: n.Name},
				Command:         jobspec.RestoreVMCommand(n.Name, s.Plan.Name),
				BackoffLimit:    1,
				DeadlineSeconds: restoreJobDeadline,
			})
			if err := s.create(ctx, job, v1beta1.ComponentNodeUpgrade); err != nil {
				return nil, err
			}
			s.setNodeState(n.Name, st.State, "", "restoring the VMs shut down for the upgrade: "+vms)
			running = append(running, n.Name)
			continue
		}
		switch state, reason, msg := JobOutcome(j); state {
		case JobSucceeded:
			s.setNodeState(n.Name, st.State, "", "restored the VMs shut down for the upgrade: "+vms)
		case JobFailed:
			if s.setNodeState(n.Name, st.State, "RestoreVMFailed", fmt.Sprintf("restoring the VMs failed (%s: %s): start them by hand: %s", reason, msg, vms)) {
				s.Event(corev1.EventTypeWarning, v1beta1.EventRestoreVMFailed, "Restoring VMs on node %s failed: Job %s/%s %s: %s", n.Name, j.Namespace, j.Name, reason, msg)
			}
		default:
			running = append(running, n.Name)
		}
	}
	return running, nil
}
