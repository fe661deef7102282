package clusterupgrade

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// The progress of a cluster upgrade lives in the ConfigMap
// <plan>-cluster-upgrade in harvester-system, so that a restarted pod
// resumes after the last finished step. It carries the plan's labels (the
// plan's cleanup deletes it) and an owner reference to the plan. Besides
// the lists of finished steps and paused charts, steps record there the
// values they saw before a change and must not compute again after a
// restart; jobspec names every key.

// progress is the record of one cluster upgrade.
type progress struct {
	c  client.Client
	cm *corev1.ConfigMap
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update

// loadProgress reads the plan's progress record, creating an empty one.
func loadProgress(ctx context.Context, c client.Client, plan *v1beta1.UpgradePlan) (*progress, error) {
	key := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeProgress(plan.Name)}
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{
					v1beta1.LabelUpgradePlan:      plan.Name,
					v1beta1.LabelUpgradeComponent: v1beta1.ComponentClusterUpgrade,
				},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan", Name: plan.Name, UID: plan.UID,
				}},
			},
			Data: map[string]string{},
		}
		err = c.Create(ctx, cm)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cluster upgrade's progress in ConfigMap %s: %w", key, err)
	}
	return &progress{c: c, cm: cm}, nil
}

func (p *progress) list(key string) []string { return jobspec.ProgressList(p.cm, key) }

// done reports whether the step finished in an earlier attempt.
func (p *progress) done(step string) bool { return slices.Contains(p.list(jobspec.ProgressDone), step) }

// paused returns the charts this upgrade paused.
func (p *progress) paused() []string { return jobspec.PausedCharts(p.cm) }

// add appends a value to a list and writes the record.
func (p *progress) add(ctx context.Context, key, value string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if slices.Contains(p.list(key), value) {
			return nil
		}
		if p.cm.Data == nil {
			p.cm.Data = map[string]string{}
		}
		p.cm.Data[key] = jobspec.ProgressListValue(append(p.list(key), value))
		err := p.c.Update(ctx, p.cm)
		if apierrors.IsConflict(err) {
			if gerr := p.c.Get(ctx, client.ObjectKeyFromObject(p.cm), p.cm); gerr != nil {
				return gerr
			}
		}
		return err
	})
}

// markDone records a finished step.
func (p *progress) markDone(ctx context.Context, step string) error {
	if err := p.add(ctx, jobspec.ProgressDone, step); err != nil {
		return fmt.Errorf("recording step %q as done: %w", step, err)
	}
	return nil
}

// value returns a recorded value.
func (p *progress) value(key string) (string, bool) {
	v, ok := p.cm.Data[key]
	return v, ok
}

// set records a value (before the change that depends on it).
func (p *progress) set(ctx context.Context, key, value string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if v, ok := p.cm.Data[key]; ok && v == value {
			return nil
		}
		if p.cm.Data == nil {
			p.cm.Data = map[string]string{}
		}
		p.cm.Data[key] = value
		err := p.c.Update(ctx, p.cm)
		if apierrors.IsConflict(err) {
			if gerr := p.c.Get(ctx, client.ObjectKeyFromObject(p.cm), p.cm); gerr != nil {
				return gerr
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("recording %s=%q in the cluster upgrade's progress: %w", key, value, err)
	}
	return nil
}

// once returns the value recorded under key, recording compute's value
// first when there is none: a value the upgrade must not compute again
// after a restart (what it saw before a change it makes).
func (p *progress) once(ctx context.Context, key string, compute func() (string, error)) (string, error) {
	if v, ok := p.value(key); ok {
		return v, nil
	}
	v, err := compute()
	if err != nil {
		return "", err
	}
	return v, p.set(ctx, key, v)
}

// markPaused records, before it pauses a chart, that this upgrade pauses it.
func (p *progress) markPaused(ctx context.Context, chart string) error {
	if err := p.add(ctx, jobspec.ProgressPaused, chart); err != nil {
		return fmt.Errorf("recording ManagedChart %s as paused by the upgrade: %w", chart, err)
	}
	return nil
}
