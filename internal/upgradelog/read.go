package upgradelog

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// Get reads a plan's UpgradeLog, saying why there is none.
func Get(ctx context.Context, c client.Reader, plan string) (*v1beta1.UpgradeLog, error) {
	ul := &v1beta1.UpgradeLog{}
	err := c.Get(ctx, client.ObjectKey{Name: plan}, ul)
	if apierrors.IsNotFound(err) {
		p := &v1beta1.UpgradePlan{}
		switch perr := c.Get(ctx, client.ObjectKey{Name: plan}, p); {
		case apierrors.IsNotFound(perr):
			return nil, fmt.Errorf("there is no UpgradePlan %s (kubectl get upgradeplans lists them)", plan)
		case perr == nil && p.Spec.LogEnabled != nil && !*p.Spec.LogEnabled:
			return nil, fmt.Errorf("plan %s keeps no logs: it was created with spec.logEnabled: false", plan)
		}
		return nil, fmt.Errorf("plan %s has no UpgradeLog: no pod of it has run yet, or the manager runs with --upgrade-log=false (chart value upgradeLog.enabled)", plan)
	}
	return ul, err
}

// Text reads one captured log's text from its ConfigMap.
func Text(ctx context.Context, c client.Reader, l v1beta1.CapturedLog) ([]byte, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: l.ConfigMap}, cm); err != nil {
		return nil, fmt.Errorf("reading the log of %s/%s %s: %w", l.Namespace, l.Pod, l.Container, err)
	}
	text, err := Gunzip(cm.BinaryData[l.Key])
	if err != nil {
		return nil, fmt.Errorf("reading the log of %s/%s %s from ConfigMap %s key %s: %w", l.Namespace, l.Pod, l.Container, cm.Name, l.Key, err)
	}
	return text, nil
}

// Select returns the logs of a Job (by name, or namespace/name) and of a
// node; an empty job or node matches every one.
func Select(logs []v1beta1.CapturedLog, job, node string) []v1beta1.CapturedLog {
	var out []v1beta1.CapturedLog
	for _, l := range logs {
		if job != "" && l.Job != job && l.Namespace+"/"+l.Job != job {
			continue
		}
		if node != "" && l.Node != node {
			continue
		}
		out = append(out, l)
	}
	return out
}

// Header is the line that introduces a log when several are printed.
func Header(l v1beta1.CapturedLog) string {
	var state []string
	if !l.Complete {
		state = append(state, "running or not read to its end")
	}
	if l.Truncated {
		state = append(state, "truncated")
	}
	s := fmt.Sprintf("==> Job %s/%s, pod %s, container %s, node %s", l.Namespace, l.Job, l.Pod, l.Container, l.Node)
	if len(state) > 0 {
		s += " (" + strings.Join(state, ", ") + ")"
	}
	return s + " <=="
}
