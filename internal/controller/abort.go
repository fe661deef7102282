package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
)

// abort ends a plan whose abort was asked for in Aborted, once it may
// (pipeline.CanAbortNow); the next pass, a Finish, deletes what it made and
// restores what it changed.
func (p *pass) abort() {
	s := p.s
	msg := AbortMessage(s.Plan)
	pipeline.SetPhase(&s.Plan.Status, v1beta1.PhaseAborted, s.Now())
	p.setEnded()
	p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonAborted, msg)
	s.Event(corev1.EventTypeWarning, v1beta1.EventUpgradeAborted, "%s", msg)
}

// AbortMessage says where a plan stopped for its abort, what the cluster
// runs and how to finish: before ClusterUpgrade nothing of the release
// reached the cluster; after it, the nodes upgraded and those not.
func AbortMessage(p *v1beta1.UpgradePlan) string {
	phase := p.Status.CurrentPhase
	if phase == "" {
		return "aborted (spec.abort) before it started: nothing was changed"
	}
	cleanup := "what the plan made is deleted and every setting it changed restored"
	if pipeline.BeforeClusterUpgrade(phase) {
		return fmt.Sprintf("aborted (spec.abort) in phase %s, before the release reached the cluster: %s; the cluster runs its release as before", phase, cleanup)
	}
	var upgraded, left []string
	for name, st := range p.Status.NodeUpgradeStatuses {
		switch {
		case nodestate.Upgraded(st.State):
			upgraded = append(upgraded, name)
		case st.State != v1beta1.NodeStateExcluded:
			left = append(left, name)
		}
	}
	slices.Sort(upgraded)
	slices.Sort(left)
	target := "the same version"
	if p.Spec.Version != nil {
		target = "version " + *p.Spec.Version
	}
	return fmt.Sprintf("aborted (spec.abort) in phase %s: the cluster's components run the new release (there is no downgrade); "+
		"nodes upgraded: %s; nodes not upgraded: %s; %s. To finish, create a new plan for %s: it upgrades the nodes left",
		phase, orNone(upgraded), orNone(left), cleanup, target)
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
