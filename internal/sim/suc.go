package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
)

// The simulated system-upgrade-controller resolves each Plan's version and
// hash, selects the nodes to apply it to (at most spec.concurrency at a time,
// skipping nodes already labelled plan.upgrade.cattle.io/<plan>=<hash>),
// runs one Job per selected node named and labelled as SUC names and labels
// them, labels a node when its Job completed, reports a failed Job in the
// Plan's Complete condition, and deletes the Jobs of a deleted Plan.

func (s *Sim) setupSUC(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-system-upgrade-controller").
		For(&upgradev1.Plan{}).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetLabels()[labelSUCController] != sucControllerName {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[cluster.LabelSUCPlan]}}}
		})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.allPlans)).
		Complete(reconcile.Func(s.reconcilePlan))
}

func (s *Sim) allPlans(ctx context.Context, _ client.Object) []reconcile.Request {
	var plans upgradev1.PlanList
	if err := s.c.List(ctx, &plans); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(plans.Items))
	for i := range plans.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&plans.Items[i])})
	}
	return reqs
}

// safeConcatName is wrangler's name.SafeConcatName, which SUC names its Jobs
// with: joined by "-", cut at 57 characters plus a hash beyond 63.
func safeConcatName(parts ...string) string {
	full := strings.Join(parts, "-")
	if len(full) < 64 {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	digest := hex.EncodeToString(sum[:])
	if c := full[56]; ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') {
		return full[:57] + "-" + digest[:5]
	}
	return full[:56] + "-" + digest[:6]
}

// planHash is SUC's digest of a plan: SHA-224 of its latest version and
// service account.
func planHash(plan *upgradev1.Plan) string {
	h := sha256.New224()
	h.Write([]byte(plan.Status.LatestVersion))
	h.Write([]byte(plan.Spec.ServiceAccountName))
	return hex.EncodeToString(h.Sum(nil))
}

func sucJobName(plan *upgradev1.Plan, node string) string {
	short, _, _ := strings.Cut(node, ".")
	return safeConcatName("apply", plan.Name, "on", short, "with", plan.Status.LatestHash)
}

func (s *Sim) reconcilePlan(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	plan := &upgradev1.Plan{}
	if err := s.c.Get(ctx, req.NamespacedName, plan); err != nil {
		if apierrors.IsNotFound(err) {
			jobs, err := s.planJobs(ctx, req.NamespacedName)
			if err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{}, s.deleteJobs(ctx, jobs, nil)
		}
		return reconcile.Result{}, err
	}
	if plan.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	old := plan.Status.DeepCopy()
	if plan.Spec.Upgrade == nil {
		setSUCCondition(plan, common.Condition{Type: sucCondValidated, Status: "False", Reason: "Error", Message: "spec.upgrade: Required value"})
		return reconcile.Result{}, s.writePlanStatus(ctx, plan, old)
	}
	setSUCCondition(plan, common.Condition{Type: sucCondValidated, Status: "True", Reason: "PlanIsValid"})
	if plan.Spec.Version == "" {
		setSUCCondition(plan, common.Condition{Type: sucCondLatestResolved, Status: "False", Reason: "Error", Message: "cannot resolve plan: missing channel and version"})
		return reconcile.Result{}, s.writePlanStatus(ctx, plan, old)
	}
	setSUCCondition(plan, common.Condition{Type: sucCondLatestResolved, Status: "True", Reason: "Version"})
	plan.Status.LatestVersion = strings.ReplaceAll(plan.Spec.Version, "+", "-")
	plan.Status.LatestHash = planHash(plan)

	jobs, err := s.planJobs(ctx, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Jobs of an older version of the plan go.
	if err := s.deleteJobs(ctx, jobs, func(j *batchv1.Job) bool { return j.Labels[labelSUCVersion] != plan.Status.LatestVersion }); err != nil {
		return reconcile.Result{}, err
	}
	done := map[string]bool{}
	for i := range jobs {
		job := &jobs[i]
		node := job.Labels[cluster.LabelSUCNode]
		switch {
		case job.Labels[labelSUCVersion] != plan.Status.LatestVersion:
		case jobCondition(job, batchv1.JobComplete):
			if err := s.labelNodeApplied(ctx, plan, node, job.Labels[cluster.LabelSUCPlanNode(plan.Name)]); err != nil {
				return reconcile.Result{}, err
			}
			done[node] = true
		case jobCondition(job, batchv1.JobFailed):
			msg := fmt.Sprintf("Job %s/%s failed on Node %s: %s: %s", job.Namespace, job.Name, node, jobReason(job), jobMessage(job))
			setSUCCondition(plan, common.Condition{Type: sucCondComplete, Status: "False", Reason: "JobFailed", Message: msg})
		}
	}
	selected, err := s.selectNodes(ctx, plan, done)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan.Status.Applying = nil
	for _, n := range selected {
		plan.Status.Applying = append(plan.Status.Applying, cluster.Hostname(n))
	}
	complete := len(selected) == 0 && plan.Spec.Concurrency > 0
	if c := common.FindCondition(plan.Status.Conditions, sucCondComplete); c == nil || c.Status != boolString(complete) {
		cond := common.Condition{Type: sucCondComplete, Status: boolString(complete)}
		if c != nil && !complete {
			cond.Reason, cond.Message = c.Reason, c.Message
		}
		setSUCCondition(plan, cond)
	}
	if err := s.writePlanStatus(ctx, plan, old); err != nil {
		return reconcile.Result{}, err
	}
	for _, n := range selected {
		if err := s.c.Create(ctx, s.sucJob(plan, n)); client.IgnoreAlreadyExists(err) != nil {
			return reconcile.Result{}, fmt.Errorf("creating the job of plan %s on node %s: %w", plan.Name, n.Name, err)
		}
	}
	return reconcile.Result{}, nil
}

func boolString(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func jobReason(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			return c.Reason
		}
	}
	return ""
}

func jobMessage(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			return c.Message
		}
	}
	return ""
}

// setSUCCondition sets a wrangler condition with its timestamps.
func setSUCCondition(plan *upgradev1.Plan, c common.Condition) {
	now := wranglerNow()
	old := common.FindCondition(plan.Status.Conditions, c.Type)
	if old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
		return
	}
	c.LastUpdateTime = now
	if old == nil || old.Status != c.Status {
		c.LastTransitionTime = now
	}
	common.SetCondition(&plan.Status.Conditions, c)
}

func (s *Sim) writePlanStatus(ctx context.Context, plan *upgradev1.Plan, old *upgradev1.PlanStatus) error {
	if equalPlanStatus(old, &plan.Status) {
		return nil
	}
	return s.c.Status().Update(ctx, plan)
}

func equalPlanStatus(a, b *upgradev1.PlanStatus) bool {
	if a.LatestVersion != b.LatestVersion || a.LatestHash != b.LatestHash || strings.Join(a.Applying, ",") != strings.Join(b.Applying, ",") || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i] != b.Conditions[i] {
			return false
		}
	}
	return true
}

// selectNodes is SUC's SelectConcurrentNodes: the nodes the plan applies to
// now. Nodes still applying stay selected; free slots go to the eligible
// nodes in an order fixed by the plan's and nodes' UIDs.
func (s *Sim) selectNodes(ctx context.Context, plan *upgradev1.Plan, done map[string]bool) ([]*corev1.Node, error) {
	sel, err := metav1.LabelSelectorAsSelector(plan.Spec.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("plan %s/%s: invalid nodeSelector: %w", plan.Namespace, plan.Name, err)
	}
	hasHost, _ := labels.NewRequirement(labelHostname, selection.Exists, nil)
	notLatest, _ := labels.NewRequirement(cluster.LabelSUCPlanNode(plan.Name), selection.NotIn, []string{"disabled", plan.Status.LatestHash})
	sel = sel.Add(*hasHost, *notLatest)
	var nodes corev1.NodeList
	// The cache's own, read only (planJobs).
	if err := s.c.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	applying := map[string]bool{}
	for _, h := range plan.Status.Applying {
		applying[h] = true
	}
	var selected, candidates []*corev1.Node
	for i := range nodes.Items {
		n := &nodes.Items[i]
		switch {
		case done[n.Name]:
		case applying[cluster.Hostname(n)]:
			selected = append(selected, n)
		default:
			candidates = append(candidates, n)
		}
	}
	key := func(n *corev1.Node) string {
		sum := sha256.Sum256([]byte(string(n.UID) + string(plan.UID) + plan.Status.LatestHash))
		return hex.EncodeToString(sum[:])
	}
	sort.Slice(candidates, func(i, j int) bool { return key(candidates[i]) < key(candidates[j]) })
	for _, n := range candidates {
		if int64(len(selected)) >= plan.Spec.Concurrency {
			break
		}
		selected = append(selected, n)
	}
	sort.Slice(selected, func(i, j int) bool { return selected[i].Name < selected[j].Name })
	return selected, nil
}

// labelNodeApplied labels a node plan.upgrade.cattle.io/<plan>=<hash>: the
// plan is applied there.
func (s *Sim) labelNodeApplied(ctx context.Context, plan *upgradev1.Plan, node, hash string) error {
	if hash == "" {
		return nil
	}
	// The cache first: every completed Job of the plan is looked at on every
	// pass, and a read from the API server for each would make a pass cost
	// as many reads as the cluster has nodes.
	n := &corev1.Node{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: node}, n, client.UnsafeDisableDeepCopy); err == nil && n.Labels[cluster.LabelSUCPlanNode(plan.Name)] == hash {
		return nil
	}
	n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return client.IgnoreNotFound(s.mutate(ctx, n, false, func() bool {
		if n.Labels[cluster.LabelSUCPlanNode(plan.Name)] == hash {
			return false
		}
		n.Labels[cluster.LabelSUCPlanNode(plan.Name)] = hash
		return true
	}))
}

// planJobs lists the plan's Jobs: the cache's own, read only. Every Plan
// is looked at on every Node event, as SUC does: copies of every Job of
// every Plan on each would cost the world more than the toolkit.
func (s *Sim) planJobs(ctx context.Context, plan types.NamespacedName) ([]batchv1.Job, error) {
	var jobs batchv1.JobList
	err := s.c.List(ctx, &jobs, client.InNamespace(plan.Namespace), client.MatchingLabels{cluster.LabelSUCPlan: plan.Name, labelSUCController: sucControllerName}, client.UnsafeDisableDeepCopy)
	return jobs.Items, err
}

// deleteJobs deletes the Jobs that match selects (all, without match).
func (s *Sim) deleteJobs(ctx context.Context, jobs []batchv1.Job, match func(*batchv1.Job) bool) error {
	for i := range jobs {
		if match != nil && !match(&jobs[i]) {
			continue
		}
		// A Job of its own to delete: jobs are the cache's, never handed
		// to a writer.
		if err := s.c.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jobs[i].Namespace, Name: jobs[i].Name}},
			client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// sucJob is the Job SUC runs for the plan on the node.
func (s *Sim) sucJob(plan *upgradev1.Plan, node *corev1.Node) *batchv1.Job {
	jobLabels := map[string]string{
		labelSUCController:                  sucControllerName,
		labelSUCExclusive:                   fmt.Sprint(plan.Spec.Exclusive),
		cluster.LabelSUCNode:                node.Name,
		cluster.LabelSUCPlan:                plan.Name,
		labelSUCVersion:                     plan.Status.LatestVersion,
		cluster.LabelSUCPlanNode(plan.Name): plan.Status.LatestHash,
	}
	for k, v := range plan.Labels {
		if !strings.Contains(k, "cattle.io/") {
			jobLabels[k] = v
		}
	}
	annotations := map[string]string{annotationSUCJobTTL: fmt.Sprint(sucJobTTLSeconds)}
	for k, v := range plan.Annotations {
		if !strings.Contains(k, "cattle.io/") && !strings.Contains(k, "kubectl.kubernetes.io/") {
			annotations[k] = v
		}
	}
	// SUC's default deadline unless the Plan sets one; 0 means none.
	deadline := ptr.To(int64(sucJobDeadlineSeconds))
	if d := plan.Spec.JobActiveDeadlineSecs; d != nil && *d >= 0 {
		deadline = ptr.To(*d)
		if *d == 0 {
			deadline = nil
		}
	}
	container := corev1.Container{
		Name: "upgrade", Image: withTag(plan.Spec.Upgrade.Image, plan.Status.LatestVersion), ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_BOOT"}}},
		VolumeMounts:    []corev1.VolumeMount{{Name: "host-root", MountPath: "/host"}},
	}
	container.Command, container.Args = plan.Spec.Upgrade.Command, plan.Spec.Upgrade.Args
	container.Env = append(container.Env, plan.Spec.Upgrade.Envs...)
	container.Env = append(container.Env,
		corev1.EnvVar{Name: jobspec.EnvSUCNode, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		corev1.EnvVar{Name: jobspec.EnvSUCPod, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		corev1.EnvVar{Name: "SYSTEM_UPGRADE_PLAN_NAME", Value: plan.Name},
		corev1.EnvVar{Name: "SYSTEM_UPGRADE_PLAN_LATEST_HASH", Value: plan.Status.LatestHash},
		corev1.EnvVar{Name: "SYSTEM_UPGRADE_PLAN_LATEST_VERSION", Value: plan.Status.LatestVersion},
	)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: plan.Namespace, Name: sucJobName(plan, node.Name), Labels: jobLabels, Annotations: annotations},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](sucJobBackoffLimit),
			TTLSecondsAfterFinished: ptr.To[int32](sucJobTTLSeconds),
			ActiveDeadlineSeconds:   deadline,
			Completions:             ptr.To[int32](1),
			Parallelism:             ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: jobLabels, Annotations: annotations},
				Spec: corev1.PodSpec{
					HostIPC: true, HostPID: true, HostNetwork: true, DNSPolicy: corev1.DNSClusterFirstWithHostNet,
					ServiceAccountName: plan.Spec.ServiceAccountName,
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
							Key: labelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{cluster.Hostname(node)},
						}}}},
					}}},
					Tolerations: append([]corev1.Toleration{{
						Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
					}}, plan.Spec.Tolerations...),
					RestartPolicy: corev1.RestartPolicyNever,
					Volumes: []corev1.Volume{{Name: "host-root", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: ptr.To(corev1.HostPathDirectory)},
					}}},
					Containers: []corev1.Container{container},
				},
			},
		},
	}
}

// withTag gives an untagged image the plan's version as tag, as SUC does.
func withTag(image, tag string) string {
	if i := strings.LastIndex(image, "/"); strings.Contains(image[i+1:], ":") || strings.Contains(image, "@") {
		return image
	}
	return image + ":" + tag
}
