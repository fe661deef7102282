package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// The manager sees Rancher's machine-plan Secrets as metadata only: it reads
// and patches their drain-hook annotations, never Rancher's plan, which
// holds the node's files and join token, runs to tens of KiB per node and
// changes whenever the system agent reports. A metadata watch neither
// transfers nor decodes it. The manager's cache holds only the Secrets of
// type MachinePlanSecretType in FleetLocalNamespace (a metadata object has
// no type to check), so every Secret read this way is a machine plan.

var secretKind = corev1.SchemeGroupVersion.WithKind("Secret")

// MachinePlan returns an empty machine-plan Secret, as metadata, to read
// into.
func MachinePlan() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(secretKind)
	return m
}

// MachinePlans lists the machine-plan Secrets, as metadata, matching opts.
// The list and its items are the cache's own: read them, never change them.
func MachinePlans(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	opts = append([]client.ListOption{client.InNamespace(FleetLocalNamespace), client.UnsafeDisableDeepCopy}, opts...)
	if err := c.List(ctx, l, opts...); err != nil {
		return nil, fmt.Errorf("listing Rancher's machine-plan Secrets: %w", err)
	}
	return l.Items, nil
}

// IsMachinePlan reports whether obj, a Secret in the manager's cache, is a
// machine plan: it names its Machine.
func IsMachinePlan(obj client.Object) bool {
	return obj.GetNamespace() == FleetLocalNamespace && obj.GetLabels()[LabelMachineName] != ""
}

// Data keys of a machine-plan Secret: Rancher's planner writes the plan,
// the node's rancher-system-agent reports how applying it went (the
// checksums are the SHA-256 of the plan, see PlanChecksum), and Rancher
// copies an applied plan to AppliedPlanKey.
const (
	MachinePlanKey     = "plan"
	AppliedPlanKey     = "appliedPlan"
	AppliedChecksumKey = "applied-checksum"
	failedChecksumKey  = "failed-checksum"
	failureCountKey    = "failure-count"
	ProbeStatusesKey   = "probe-statuses"
)

// PlanChecksum is the checksum the agent reports of a plan it applied.
func PlanChecksum(plan []byte) string {
	sum := sha256.Sum256(plan)
	return hex.EncodeToString(sum[:])
}

// PlanProgress is how far a node's rancher-system-agent is with Rancher's
// current plan for it.
type PlanProgress struct {
	// Applied: the agent applied the current plan (applied-checksum is the
	// plan's SHA-256).
	Applied bool
	// Failed: applying the current plan failed (failed-checksum), FailureCount
	// times so far.
	Failed       bool
	FailureCount string
	// UnhealthyProbes are the plan's probes (e.g. kubelet) that fail.
	UnhealthyProbes []string
}

// readPlanProgress reads a machine-plan Secret whole, its data included,
// from r (the API server: the manager's cache holds its metadata only) and
// says how far the agent is with the plan, and at which version.
func readPlanProgress(ctx context.Context, r client.Reader, name string) (PlanProgress, string, error) {
	sec := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: FleetLocalNamespace, Name: name}, sec); err != nil {
		return PlanProgress{}, "", fmt.Errorf("reading machine-plan Secret %s/%s: %w", FleetLocalNamespace, name, err)
	}
	return planProgress(sec.Data), sec.ResourceVersion, nil
}

// PlanProgressReader reads the progress of machine plans from the API server
// once per version of their Secret. Rancher's plans carry the node's files,
// tens of KiB, and a node that Rancher drains is looked at on every pass:
// reading its Secret each time was most of the bytes the manager received.
type PlanProgressReader struct {
	// Reader is the API server.
	Reader client.Reader

	mu   sync.Mutex
	read map[string]versionedProgress // by Secret name
}

type versionedProgress struct {
	version  string
	progress PlanProgress
}

// Read says how far the agent is with the plan of the machine-plan Secret
// whose metadata (from the cache) is sec: what the last read found when sec
// is still at the version it read, else a new read.
func (p *PlanProgressReader) Read(ctx context.Context, sec client.Object) (PlanProgress, error) {
	name := sec.GetName()
	p.mu.Lock()
	last, ok := p.read[name]
	p.mu.Unlock()
	if ok && last.version == sec.GetResourceVersion() {
		return last.progress, nil
	}
	progress, version, err := readPlanProgress(ctx, p.Reader, name)
	if err != nil {
		return PlanProgress{}, err
	}
	p.mu.Lock()
	if p.read == nil {
		p.read = map[string]versionedProgress{}
	}
	p.read[name] = versionedProgress{version: version, progress: progress}
	p.mu.Unlock()
	return progress, nil
}

func planProgress(data map[string][]byte) PlanProgress {
	plan := PlanChecksum(data[MachinePlanKey])
	p := PlanProgress{
		Applied:      string(data[AppliedChecksumKey]) == plan,
		Failed:       string(data[failedChecksumKey]) == plan,
		FailureCount: string(data[failureCountKey]),
	}
	var probes map[string]struct {
		Healthy bool `json:"healthy"`
	}
	if json.Unmarshal(data[ProbeStatusesKey], &probes) == nil {
		for name, st := range probes {
			if !st.Healthy {
				p.UnhealthyProbes = append(p.UnhealthyProbes, name)
			}
		}
		sort.Strings(p.UnhealthyProbes)
	}
	return p
}

// String says how far the agent is, for messages.
func (p PlanProgress) String() string {
	switch {
	case p.Failed:
		s := "applying the plan failed"
		if p.FailureCount != "" {
			s += " (" + p.FailureCount + " times)"
		}
		return s
	case !p.Applied:
		return "plan not applied yet"
	case len(p.UnhealthyProbes) > 0:
		return "plan applied, waiting for probes: " + strings.Join(p.UnhealthyProbes, ", ")
	}
	return "plan applied"
}

// DescribeMachine says what Rancher reports of a machine while it rolls it:
// how far the drain went (from the plan Secret's annotations), how far the
// agent is with the plan, the machine's conditions that are not True, and
// what the provisioning Cluster's conditions say about the machine.
func DescribeMachine(m *capiv1beta1.Machine, planSecret client.Object, progress *PlanProgress, cl *provisioningv1.Cluster) string {
	var parts []string
	name := planSecret.GetLabels()[LabelMachineName]
	a := planSecret.GetAnnotations()
	switch opts := a[AnnotationRancherDrainOptions]; {
	case a[AnnotationRancherDrainError] != "":
		parts = append(parts, "drain error: "+a[AnnotationRancherDrainError])
	case opts != "" && a[AnnotationRancherDrainDone] == opts:
		parts = append(parts, "drained")
	case a[AnnotationRancherPreDrain] != "" && a[AnnotationRancherPreDrain] == opts:
		parts = append(parts, "draining")
	}
	if progress != nil {
		parts = append(parts, progress.String())
	}
	if m != nil {
		for _, c := range m.Status.Conditions {
			if c.Status != "True" && c.Status != "" {
				parts = append(parts, conditionText("Machine "+c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	if cl != nil {
		seen := map[string]bool{}
		for _, c := range cl.Status.Conditions {
			// Rancher repeats one message in several conditions: say it once.
			if c.Status != "True" && name != "" && strings.Contains(c.Message, name) && !seen[c.Message] {
				seen[c.Message] = true
				parts = append(parts, conditionText("cluster "+c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	return fmt.Sprintf("machine %s: %s", name, strings.Join(parts, "; "))
}

func conditionText(what, status, reason, message string) string {
	s := what + "=" + status
	if reason != "" {
		s += " (" + reason + ")"
	}
	if message != "" {
		s += ": " + message
	}
	return s
}

// InRancherDrain reports whether Rancher works on the machine of a
// machine-plan Secret with these annotations: it asked for a drain hook,
// drains it, or is to uncordon it. Rancher cordons such a node itself.
func InRancherDrain(a map[string]string) bool {
	return a[AnnotationRancherPreDrain] != "" || a[AnnotationRancherPostDrain] != "" ||
		a[AnnotationRancherDrainOptions] != "" || a[AnnotationRancherUncordon] != ""
}
