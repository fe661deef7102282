package v1beta1

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Forced reports whether spec.force is true.
func (p *UpgradePlan) Forced() bool {
	return p.Spec.Force != nil && *p.Spec.Force
}

// RestoreVMEnabled reports whether spec.restoreVM is true.
func (p *UpgradePlan) RestoreVMEnabled() bool {
	return p.Spec.RestoreVM != nil && *p.Spec.RestoreVM
}

// IsPaused reports whether spec.paused is true: the plan holds at its next
// safe point.
func (p *UpgradePlan) IsPaused() bool {
	return p.Spec.Paused != nil && *p.Spec.Paused
}

// AbortRequested reports whether spec.abort is true on a plan that has not
// ended: it stops at its next safe point and ends Aborted.
func (p *UpgradePlan) AbortRequested() bool {
	return p.Spec.Abort != nil && *p.Spec.Abort && !p.IsFinished()
}

// HoldsNode reports whether a node that has not started its upgrade must
// wait: the plan is paused or aborting, or the node is listed in
// pauseNodes.
func (p *UpgradePlan) HoldsNode(node string) bool {
	return p.IsPaused() || p.AbortRequested() || p.IsNodePaused(node)
}

// PauseNodes returns spec.nodeUpgradeOption.pauseNodes (nil when unset).
func (p *UpgradePlan) PauseNodes() []string {
	if p.Spec.NodeUpgradeOption == nil {
		return nil
	}
	return p.Spec.NodeUpgradeOption.PauseNodes
}

// IsNodePaused reports whether the node is listed in pauseNodes.
func (p *UpgradePlan) IsNodePaused(node string) bool {
	return slices.Contains(p.PauseNodes(), node)
}

// ExcludeNodes returns spec.nodeUpgradeOption.excludeNodes.
func (p *UpgradePlan) ExcludeNodes() []string {
	if p.Spec.NodeUpgradeOption == nil {
		return nil
	}
	return p.Spec.NodeUpgradeOption.ExcludeNodes
}

// IsNodeExcluded reports whether the node is listed in
// spec.nodeUpgradeOption.excludeNodes.
func (p *UpgradePlan) IsNodeExcluded(node string) bool {
	return slices.Contains(p.ExcludeNodes(), node)
}

// ExcludedNodes are the nodes recorded Excluded, sorted.
func (p *UpgradePlan) ExcludedNodes() []string {
	var out []string
	for name, st := range p.Status.NodeUpgradeStatuses {
		if st.State == NodeStateExcluded {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// HealthGateMode returns spec.nodeUpgradeOption.healthGate, Strict when unset.
func (p *UpgradePlan) HealthGateMode() HealthGateMode {
	if p.Spec.NodeUpgradeOption == nil || p.Spec.NodeUpgradeOption.HealthGate == nil {
		return HealthGateStrict
	}
	return *p.Spec.NodeUpgradeOption.HealthGate
}

// MaxUnavailableNodes returns spec.nodeUpgradeOption.maxUnavailableNodes,
// 1 when unset.
func (p *UpgradePlan) MaxUnavailableNodes() int {
	if p.Spec.NodeUpgradeOption == nil || p.Spec.NodeUpgradeOption.MaxUnavailableNodes == nil {
		return 1
	}
	return int(*p.Spec.NodeUpgradeOption.MaxUnavailableNodes)
}

// PreloadConcurrency returns spec.imagePreloadOption.concurrency, 0 when unset.
func (p *UpgradePlan) PreloadConcurrency() int {
	if p.Spec.ImagePreloadOption == nil || p.Spec.ImagePreloadOption.Concurrency == nil {
		return 0
	}
	return *p.Spec.ImagePreloadOption.Concurrency
}

// CleanupConcurrency returns spec.imageCleanupOption.concurrency,
// DefaultImageCleanupConcurrency when unset (or, from an object older than
// the field's validation, not positive).
func (p *UpgradePlan) CleanupConcurrency() int {
	if o := p.Spec.ImageCleanupOption; o != nil && o.Concurrency != nil && *o.Concurrency > 0 {
		return *o.Concurrency
	}
	return DefaultImageCleanupConcurrency
}

// Check returns the recorded check of that name (status.checks), or nil.
func (p *UpgradePlan) Check(name string) *Check {
	for i := range p.Status.Checks {
		if p.Status.Checks[i].Name == name {
			return &p.Status.Checks[i]
		}
	}
	return nil
}

// Condition returns the condition of the given type, or nil.
func (p *UpgradePlan) Condition(conditionType string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, conditionType)
}

// IsFinished reports whether the plan reached Succeeded or Failed.
func (p *UpgradePlan) IsFinished() bool {
	return p.Status.CurrentPhase.IsTerminal()
}

// IsStarted reports whether the plan took the upgrade slot: it has entered a
// phase. A plan that waits for another one has no phase yet.
func (p *UpgradePlan) IsStarted() bool {
	return p.Status.CurrentPhase != ""
}

// IsDryRun reports whether the plan only previews the upgrade (spec.dryRun).
func (p *UpgradePlan) IsDryRun() bool {
	return p.Spec.DryRun != nil && *p.Spec.DryRun
}

// LastFailure returns the plan's latest failure, nil if it never failed.
func (p *UpgradePlan) LastFailure() *Failure {
	if n := len(p.Status.Failures); n > 0 {
		return &p.Status.Failures[n-1]
	}
	return nil
}

// AwaitsRetry reports whether the plan failed with a failure a retry can
// cure and still holds everything a retry needs: it has not been retried,
// cleaned up (its finalizer is on) or deleted.
func (p *UpgradePlan) AwaitsRetry() bool {
	f := p.LastFailure()
	return p.Status.CurrentPhase == PhaseFailed && p.DeletionTimestamp.IsZero() && f != nil &&
		f.RetryDeadline != nil && f.RetriedAt == nil && slices.Contains(p.Finalizers, FinalizerCleanup)
}

// RetryRequested returns the value of the retry annotation when it asks
// for a retry the controller has not taken into account yet, "" otherwise.
func (p *UpgradePlan) RetryRequested() string {
	if v := p.Annotations[AnnotationRetry]; v != "" && v != p.Status.ObservedRetry {
		return v
	}
	return ""
}

// RetriedAt returns when the plan was last retried (zero if never):
// deadlines measured from an earlier moment run from here instead.
func (p *UpgradePlan) RetriedAt() time.Time {
	for i := len(p.Status.Failures) - 1; i >= 0; i-- {
		if t := p.Status.Failures[i].RetriedAt; t != nil {
			return t.Time
		}
	}
	return time.Time{}
}
