package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// The simulated Rancher rolls a new Kubernetes version or provisionGeneration
// of fleet-local/local over the machines one at a time, control plane and
// etcd machines first, the way Rancher's planner and its machine-drain
// handler do it through annotations of each machine's plan Secret:
//
//	planner        drain-options=<json>
//	machine-drain  cordon; pre-drain=<json>; wait for every preDrainHook
//	               annotation to equal <json>; drain; drain-done=<json>
//	planner        apply the plan (the kubelet runs the new version)
//	planner        uncordon=<json>
//	machine-drain  post-drain=<json>; wait for every postDrainHook annotation;
//	               uncordon; remove all drain and hook annotations
//
// Without hooks, and without drain on a one-machine cluster, only the new
// version is applied. Every step ends with a write of the plan Secret, whose
// watch brings the next step.

var localClusterKey = types.NamespacedName{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}

func (s *Sim) setupRancher(mgr ctrl.Manager) error {
	toCluster := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: localClusterKey}}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("sim-rancher").
		For(&provisioningv1.Cluster{}).
		Watches(&corev1.Secret{}, toCluster).
		Watches(&capiv1beta1.Machine{}, toCluster).
		Complete(reconcile.Func(s.reconcileRancher))
}

// rolloutMachine is one machine with its plan Secret and node.
type rolloutMachine struct {
	machine      *capiv1beta1.Machine
	secret       *corev1.Secret
	node         string
	controlPlane bool
	applied      nodePlan
}

// role names the machine's role as Rancher's messages do.
func (m *rolloutMachine) role() string {
	l := m.machine.Labels
	switch {
	case l[labelMachineControlPlane] == "true":
		return "control plane"
	case l[labelMachineEtcd] == "true":
		return "etcd"
	}
	return "worker"
}

func (m *rolloutMachine) inDrain() bool {
	return cluster.InRancherDrain(m.secret.Annotations)
}

func (s *Sim) reconcileRancher(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.NamespacedName != localClusterKey {
		return reconcile.Result{}, nil
	}
	cl := &provisioningv1.Cluster{}
	if err := s.c.Get(ctx, localClusterKey, cl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	desired := nodePlan{KubernetesVersion: cl.Spec.KubernetesVersion}
	if cl.Spec.RKEConfig != nil {
		desired.ProvisionGeneration = cl.Spec.RKEConfig.ProvisionGeneration
	}
	machines, err := s.rolloutMachines(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var current *rolloutMachine
	for _, m := range machines {
		if m.inDrain() {
			current = m
			break
		}
	}
	if current == nil {
		for _, m := range machines {
			if m.applied != desired {
				current = m
				break
			}
		}
	}
	if current == nil {
		return reconcile.Result{}, s.setClusterReady(ctx, cl, "")
	}
	step, wait, err := s.rolloutStep(ctx, cl, current, desired, len(machines))
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := s.setClusterReady(ctx, cl, fmt.Sprintf("configuring %s node(s) %s: %s", current.role(), current.machine.Name, step)); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: wait}, nil
}

func (s *Sim) rolloutMachines(ctx context.Context) ([]*rolloutMachine, error) {
	var machines capiv1beta1.MachineList
	if err := s.c.List(ctx, &machines, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		return nil, err
	}
	var secrets corev1.SecretList
	if err := s.c.List(ctx, &secrets, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		return nil, err
	}
	byMachine := map[string]*corev1.Secret{}
	for i := range secrets.Items {
		sec := &secrets.Items[i]
		if sec.Type == cluster.MachinePlanSecretType {
			byMachine[sec.Labels[cluster.LabelMachineName]] = sec
		}
	}
	var out []*rolloutMachine
	for i := range machines.Items {
		m := &machines.Items[i]
		sec := byMachine[m.Name]
		if sec == nil || m.Status.NodeRef == nil {
			continue
		}
		applied, _ := decodeNodePlan(sec.Data[cluster.AppliedPlanKey])
		out = append(out, &rolloutMachine{
			machine: m, secret: sec, node: m.Status.NodeRef.Name, applied: applied,
			controlPlane: cluster.MachineServesControlPlane(m),
		})
	}
	slices.SortStableFunc(out, func(a, b *rolloutMachine) int { return cluster.CompareRolloutOrder(a.machine, b.machine) })
	return out, nil
}

// drainOptions returns the drain options of the machine's role.
func drainOptions(cl *provisioningv1.Cluster, controlPlane bool) provisioningv1.DrainOptions {
	if cl.Spec.RKEConfig == nil || cl.Spec.RKEConfig.UpgradeStrategy == nil {
		return provisioningv1.DrainOptions{}
	}
	if controlPlane {
		return cl.Spec.RKEConfig.UpgradeStrategy.ControlPlaneDrainOptions
	}
	return cl.Spec.RKEConfig.UpgradeStrategy.WorkerDrainOptions
}

// optionsString is the drain options as Rancher writes them into the
// drain-options annotation: JSON with sorted keys. A one-machine cluster is
// never drained, only its hooks run.
func optionsString(opts provisioningv1.DrainOptions, single bool) (string, error) {
	if single {
		opts.Enabled = false
	}
	b, err := json.Marshal(opts)
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	b, err = json.Marshal(m)
	return string(b), err
}

func hooksAcked(sec *corev1.Secret, hooks []provisioningv1.DrainHook, value string) bool {
	for _, h := range hooks {
		if h.Annotation != "" && sec.Annotations[h.Annotation] != value {
			return false
		}
	}
	return true
}

// rolloutStep performs the next step of the machine's rollout and returns
// what it is doing, for the cluster's status, and how long to wait before
// looking again (0: a watch brings the next step).
func (s *Sim) rolloutStep(ctx context.Context, cl *provisioningv1.Cluster, m *rolloutMachine, desired nodePlan, machines int) (string, time.Duration, error) {
	opts := drainOptions(cl, m.controlPlane)
	hooks := len(opts.PreDrainHooks)+len(opts.PostDrainHooks) > 0
	if !hooks && (!opts.Enabled || machines == 1) && !m.inDrain() {
		return s.applyPlan(ctx, m, desired)
	}
	value, err := optionsString(opts, machines == 1)
	if err != nil {
		return "", 0, err
	}
	ann := m.secret.Annotations
	drain := ann[cluster.AnnotationRancherDrainOptions]
	switch {
	case ann[cluster.AnnotationRancherUncordon] != "":
		return s.undrain(ctx, m, drain)
	case drain == "":
		step := "drain-options/" + m.machine.Name
		if wait := s.steps.remaining(step, s.cfg.Timing.DrainStep); wait > 0 {
			return "preparing to drain", wait, nil
		}
		s.steps.forget(step)
		return "draining node", 0, s.annotate(ctx, m.secret, map[string]string{cluster.AnnotationRancherDrainOptions: value})
	case ann[cluster.AnnotationRancherDrainDone] != drain:
		return s.drain(ctx, m, drain)
	case m.applied != desired:
		return s.applyPlan(ctx, m, desired)
	default:
		return "uncordoning node", 0, s.annotate(ctx, m.secret, map[string]string{cluster.AnnotationRancherUncordon: drain})
	}
}

// drain is the machine-drain handler's drain: cordon, the pre-drain hooks,
// then the drain itself.
func (s *Sim) drain(ctx context.Context, m *rolloutMachine, value string) (string, time.Duration, error) {
	var opts provisioningv1.DrainOptions
	if err := json.Unmarshal([]byte(value), &opts); err != nil {
		return "", 0, fmt.Errorf("machine %s: unreadable drain options %q: %w", m.machine.Name, value, err)
	}
	if err := s.cordon(ctx, m.node, true); err != nil {
		return "", 0, err
	}
	if len(opts.PreDrainHooks) > 0 {
		if m.secret.Annotations[cluster.AnnotationRancherPreDrain] != value {
			return "waiting for pre-drain hooks", 0, s.annotate(ctx, m.secret, map[string]string{cluster.AnnotationRancherPreDrain: value})
		}
		if !hooksAcked(m.secret, opts.PreDrainHooks, value) {
			return "waiting for pre-drain hooks", 0, nil
		}
	}
	if opts.Enabled {
		step := "drain/" + m.machine.Name
		if wait := s.steps.remaining(step, s.cfg.Timing.DrainStep); wait > 0 {
			return "draining node", wait, nil
		}
		refused, err := s.evictPods(ctx, m.node)
		if err != nil {
			return "", 0, err
		}
		if len(refused) > 0 {
			return s.drainRefused(ctx, m, opts, refused)
		}
		s.steps.forget(step)
		s.steps.forget("drain-timeout/" + m.machine.Name)
	}
	return "draining node", 0, s.annotate(ctx, m.secret, map[string]string{
		cluster.AnnotationRancherDrainDone: value, cluster.AnnotationRancherDrainError: "",
	})
}

// undrain is the machine-drain handler's undrain: the post-drain hooks, then
// uncordon and remove every drain and hook annotation.
func (s *Sim) undrain(ctx context.Context, m *rolloutMachine, value string) (string, time.Duration, error) {
	var opts provisioningv1.DrainOptions
	if err := json.Unmarshal([]byte(value), &opts); err != nil {
		return "", 0, fmt.Errorf("machine %s: unreadable drain options %q: %w", m.machine.Name, value, err)
	}
	if len(opts.PostDrainHooks) > 0 {
		if m.secret.Annotations[cluster.AnnotationRancherPostDrain] != value {
			return "waiting for post-drain hooks", 0, s.annotate(ctx, m.secret, map[string]string{cluster.AnnotationRancherPostDrain: value})
		}
		if !hooksAcked(m.secret, opts.PostDrainHooks, value) {
			return "waiting for post-drain hooks", 0, nil
		}
	}
	step := "uncordon/" + m.machine.Name
	if wait := s.steps.remaining(step, s.cfg.Timing.DrainStep); wait > 0 {
		return "uncordoning node", wait, nil
	}
	if err := s.cordon(ctx, m.node, false); err != nil {
		return "", 0, err
	}
	s.steps.forget(step)
	clear := map[string]string{
		cluster.AnnotationRancherPreDrain: "", cluster.AnnotationRancherPostDrain: "", cluster.AnnotationRancherDrainOptions: "",
		cluster.AnnotationRancherDrainDone: "", cluster.AnnotationRancherUncordon: "", cluster.AnnotationRancherDrainError: "",
	}
	for _, h := range append(opts.PreDrainHooks, opts.PostDrainHooks...) {
		if h.Annotation != "" {
			clear[h.Annotation] = ""
		}
	}
	return "uncordoning node", 0, s.annotate(ctx, m.secret, clear)
}

// applyPlan is Rancher writing the machine's new plan into its Secret, then
// the node's rancher-system-agent applying it: the kubelet runs the new
// version, and the agent reports the plan's checksum (applied-checksum),
// which Rancher copies into appliedPlan.
func (s *Sim) applyPlan(ctx context.Context, m *rolloutMachine, desired nodePlan) (string, time.Duration, error) {
	if current, _ := decodeNodePlan(m.secret.Data[cluster.MachinePlanKey]); current != desired {
		sec := m.secret.DeepCopy()
		sec.Data[cluster.MachinePlanKey] = desired.encode()
		return "waiting for plan to be applied", 0, s.c.Update(ctx, sec)
	}
	if s.faults.planNeverApplies(m.node) {
		// Look again later: a test may lift the fault.
		return "waiting for plan to be applied", time.Second, nil
	}
	step := "apply/" + m.machine.Name
	if wait := s.steps.remaining(step, s.cfg.Timing.DrainStep); wait > 0 {
		return "waiting for plan to be applied", wait, nil
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.node}}
	want := release.KubeletVersionOf(desired.KubernetesVersion)
	if err := s.mutate(ctx, n, true, func() bool {
		if n.Status.NodeInfo.KubeletVersion == want || s.faults.kubeletStaysOld(m.node) {
			return false
		}
		n.Status.NodeInfo.KubeletVersion = want
		return true
	}); err != nil {
		return "", 0, fmt.Errorf("upgrading the kubelet of node %s: %w", m.node, err)
	}
	sec := m.secret.DeepCopy()
	sec.Data[cluster.AppliedChecksumKey] = []byte(cluster.PlanChecksum(sec.Data[cluster.MachinePlanKey]))
	sec.Data[cluster.AppliedPlanKey] = sec.Data[cluster.MachinePlanKey]
	if err := s.c.Update(ctx, sec); err != nil {
		return "", 0, err
	}
	s.steps.forget(step)
	return "waiting for plan to be applied", 0, nil
}

// annotate sets (or, for "", removes) annotations of a plan Secret.
func (s *Sim) annotate(ctx context.Context, sec *corev1.Secret, set map[string]string) error {
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sec.Namespace, Name: sec.Name}}
	return s.mutate(ctx, obj, false, func() bool {
		changed := false
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		for k, v := range set {
			old, had := obj.Annotations[k]
			switch {
			case v == "" && had:
				delete(obj.Annotations, k)
				changed = true
			case v != "" && old != v:
				obj.Annotations[k] = v
				changed = true
			}
		}
		return changed
	})
}

func (s *Sim) cordon(ctx context.Context, node string, unschedulable bool) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return s.mutate(ctx, n, false, func() bool {
		if n.Spec.Unschedulable == unschedulable {
			return false
		}
		n.Spec.Unschedulable = unschedulable
		return true
	})
}

// drainRetry is how long kubectl's drain waits before it tries a refused
// eviction again.
const drainRetry = 5 * time.Second

// drainRefused is kubectl's drain (Rancher's drain helper) retrying the
// evictions the API server refused (429: a PodDisruptionBudget allows no
// disruption) every 5 s until the drain's timeout; then Rancher records the
// drain's error in the drain-error annotation and drains again. The timeout
// the message names is the drain options' (600 s when unset), the simulator
// waits Timing.DrainTimeout.
func (s *Sim) drainRefused(ctx context.Context, m *rolloutMachine, opts provisioningv1.DrainOptions, refused []*corev1.Pod) (string, time.Duration, error) {
	key := "drain-timeout/" + m.machine.Name
	if wait := s.steps.remaining(key, s.cfg.Timing.DrainTimeout); wait > 0 {
		return "draining node", min(wait, drainRetry), nil
	}
	s.steps.forget(key)
	timeout := time.Duration(opts.Timeout) * time.Second
	if timeout == 0 {
		timeout = rancherDrainTimeout
	}
	msgs := make([]string, 0, len(refused))
	for _, p := range refused {
		msgs = append(msgs, fmt.Sprintf("error when evicting pods/%q -n %q: global timeout reached: %v", p.Name, p.Namespace, timeout))
	}
	msg := msgs[0]
	if len(msgs) > 1 {
		// utilerrors.NewAggregate's format.
		msg = "[" + strings.Join(msgs, ", ") + "]"
	}
	return "draining node", drainRetry, s.annotate(ctx, m.secret, map[string]string{cluster.AnnotationRancherDrainError: msg})
}

// evictPods evicts the node's pods except DaemonSet and mirror pods, as
// kubectl drain with ignoreDaemonSets does, through the API server's
// eviction subresource. With no kubelet to wait for, evicted pods go at
// once. It returns the pods whose eviction the API server refused with 429
// (a PodDisruptionBudget allows no disruption now).
func (s *Sim) evictPods(ctx context.Context, node string) ([]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := s.reader.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	var refused []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror || ownedByDaemonSet(p) {
			continue
		}
		ev := &policyv1.Eviction{DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}}
		err := s.c.SubResource("eviction").Create(ctx, p, ev)
		switch {
		case apierrors.IsTooManyRequests(err):
			s.log.V(1).Info(fmt.Sprintf("error when evicting pods/%q -n %q (will retry after %v): %v", p.Name, p.Namespace, drainRetry, err))
			refused = append(refused, p)
		case client.IgnoreNotFound(err) != nil:
			return nil, fmt.Errorf("evicting pod %s/%s from node %s: %w", p.Namespace, p.Name, node, err)
		}
	}
	return refused, nil
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// setClusterReady reports the rollout in the Cluster's status: ready, or the
// step under way.
func (s *Sim) setClusterReady(ctx context.Context, cl *provisioningv1.Cluster, step string) error {
	ready := step == ""
	updated := common.Condition{Type: "Updated", Status: "True"}
	readyCond := common.Condition{Type: "Ready", Status: "True"}
	if !ready {
		updated = common.Condition{Type: "Updated", Status: "Unknown", Reason: "Waiting", Message: step}
		readyCond = common.Condition{Type: "Ready", Status: "False", Reason: "Waiting", Message: step}
	}
	changed := cl.Status.Ready != ready || cl.Status.ObservedGeneration != cl.Generation
	now := wranglerNow()
	for _, c := range []common.Condition{updated, readyCond} {
		old := common.FindCondition(cl.Status.Conditions, c.Type)
		c.LastUpdateTime = now
		if old == nil || old.Status != c.Status {
			c.LastTransitionTime = now
		}
		if common.SetCondition(&cl.Status.Conditions, c) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	cl.Status.Ready, cl.Status.ObservedGeneration = ready, cl.Generation
	return s.c.Status().Update(ctx, cl)
}
