// Package manager builds the controller manager: the scheme, the cache, the
// health endpoints and every controller and webhook of the toolkit.
package manager

import (
	"fmt"
	"strings"
	"time"
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/controller"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/planstatus"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
	"github.com/harvester/upgrade-toolkit/internal/webhook"
)

// LeaderElectionID is the lease that makes only one manager replica active.
const LeaderElectionID = "3509939c.harvesterhci.io"

// Options configure the manager.
type Options struct {
	// MetricsAddr is the metrics listen address; "0" disables metrics.
	MetricsAddr string
	// MetricsSecure serves metrics over HTTPS to authenticated and
	// authorized scrapers only (see internal/metrics).
	MetricsSecure bool
	// ProbeAddr is the health probe listen address; "0" disables probes.
	ProbeAddr string
	// PprofAddr serves Go's profiles (/debug/pprof); "" or "0" disables it.
	PprofAddr string
	// LeaderElect enables leader election.
	LeaderElect bool
	// Lease times the leader election; zero values take client-go's
	// defaults (15 s, 10 s, 2 s).
	Lease LeaseOptions
	// Phase configures the phases; nil takes phase.DefaultConfig.
	Phase *phase.Config
	// Clock is the time source of every deadline; nil is the real clock.
	Clock clock.PassiveClock
	// WithoutReconcilers runs the webhook alone, without the reconcilers
	// that drive plans: for tests of admission on plans in made-up states.
	WithoutReconcilers bool
	// Namespace is the namespace the manager runs in; it holds the
	// webhook's certificate Secret and the leader election Lease.
	Namespace string
	// Webhook configures the admission webhook server.
	Webhook webhook.Options
	// UpgradeLog configures the capture of the upgrade's logs; off (the
	// zero value) runs nothing of it.
	UpgradeLog upgradelog.Options
	// Alerts, when set, gives the alerts firing to the webhook and to
	// Initialize, for the risk CriticalAlertFiring.
	Alerts preflight.AlertSource
}

// LeaseOptions time the leader election: how long a lease lasts without a
// renewal (a standby takes over a killed leader after at most this), how
// long the leader keeps trying to renew before it gives up, and how often
// it tries.
type LeaseOptions struct {
	Duration, RenewDeadline, RetryPeriod time.Duration
}

// orNil is a duration option for controller-runtime: nil takes its default.
func orNil(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// New builds a manager with every controller of the toolkit.
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	if opts.Phase == nil {
		c := phase.DefaultConfig()
		opts.Phase = &c
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Phase.UpgradeLog = opts.UpgradeLog.Enabled
	opts.Phase.Alerts, opts.Webhook.Alerts = opts.Alerts, opts.Alerts
	cfg = rest.CopyConfig(cfg)
	// client-go's default of 5 requests a second (controller-runtime: 20)
	// would pace a 200-node upgrade; the manager's writes are few and small.
	cfg.QPS, cfg.Burst = max(cfg.QPS, 50), max(cfg.Burst, 100)
	cfg = apicount.Instrument(cfg)
	plans, err := planstatus.New(cfg)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 cluster.Scheme(),
		MapperProvider:         newRESTMapper,
		Metrics:                metrics.ServerOptions(opts.MetricsAddr, opts.MetricsSecure),
		HealthProbeBindAddress: opts.ProbeAddr,
		PprofBindAddress:       opts.PprofAddr,
		LeaderElection:         opts.LeaderElect,
		LeaderElectionID:       LeaderElectionID,
		// Given, so that the manager also elects outside a pod (make run).
		LeaderElectionNamespace: opts.Namespace,
		// The process ends when the manager stops, so the next replica may
		// take over at once rather than after the lease expires.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 orNil(opts.Lease.Duration),
		RenewDeadline:                 orNil(opts.Lease.RenewDeadline),
		RetryPeriod:                   orNil(opts.Lease.RetryPeriod),
		Cache:                         cacheOptions(opts.UpgradeLog.Enabled, plans),
		// A process may build more than one manager (tests, the demo's
		// restarts); the controllers' metrics are shared, not duplicated.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: opts.Webhook.Host, Port: opts.Webhook.Port, CertDir: opts.Webhook.CertDir,
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	if !opts.WithoutReconcilers {
		if err := controller.Setup(mgr, opts.Phase, opts.Clock, plans); err != nil {
			return nil, err
		}
		if err := metrics.Register(mgr.GetClient()); err != nil {
			return nil, fmt.Errorf("registering the upgrade's metrics: %w", err)
		}
		if err := upgradelog.Setup(mgr, opts.UpgradeLog); err != nil {
			return nil, fmt.Errorf("setting up the capture of the upgrade's logs: %w", err)
		}
	}
	if err := webhook.Setup(mgr, opts.Namespace, opts.Webhook, opts.UpgradeLog.Enabled); err != nil {
		return nil, err
	}
	return mgr, nil
}

// stripNode keeps of a cached Node's status what the manager reads (its
// Ready condition, phase and nodeInfo) and drops the rest: managedFields,
// the other conditions (pressures, the network), the list of images
// (hundreds per node), and the resource lists, addresses and volumes, which
// hold a node's many quantities and are read by nothing. Status is never
// written from the cache.
func stripNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		shareMeta(&n.ObjectMeta)
		var ready []corev1.NodeCondition
		if c := cluster.ReadyCondition(n); c != nil {
			ready = []corev1.NodeCondition{*c}
		}
		n.Status = corev1.NodeStatus{Conditions: ready, Phase: n.Status.Phase, NodeInfo: n.Status.NodeInfo}
	}
	return obj, nil
}

// stripJob keeps of a cached Job's spec whether it is suspended: the
// manager only creates Jobs and reads their labels, status and suspension,
// and with four Jobs per node (preload, pre-drain, post-drain, cleanup) the
// pod templates, selectors and failure policies would be much of what it
// caches on a large cluster.
func stripJob(obj any) (any, error) {
	if j, ok := obj.(*batchv1.Job); ok {
		shareMeta(&j.ObjectMeta)
		j.Spec = batchv1.JobSpec{Suspend: j.Spec.Suspend}
	}
	return obj, nil
}

// stripPod keeps of a cached pod (an upgrade's Job's) what the manager
// reads: its metadata, the node it runs on, its containers' names and images,
// its phase, the scheduler's verdict and how its containers run and ended.
// The rest of the spec (volumes, environment, tolerations, affinity) is most
// of a pod, and an upgrade has four per node; the pods are changed only by
// patches computed from the cached copy (finalizers), which carry just the
// change.
func stripPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		shareMeta(&p.ObjectMeta)
		p.Spec = corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			InitContainers: containerNames(p.Spec.InitContainers),
			Containers:     containerNames(p.Spec.Containers),
		}
		st := corev1.PodStatus{
			Phase:                 p.Status.Phase,
			InitContainerStatuses: containerStates(p.Status.InitContainerStatuses),
			ContainerStatuses:     containerStates(p.Status.ContainerStatuses),
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				st.Conditions = []corev1.PodCondition{c}
			}
		}
		p.Status = st
	}
	return obj, nil
}

func containerNames(cs []corev1.Container) []corev1.Container {
	out := make([]corev1.Container, 0, len(cs))
	for _, c := range cs {
		out = append(out, corev1.Container{Name: c.Name, Image: c.Image})
	}
	return out
}

// containerStates keeps of containers' statuses their names, states and
// restarts, not their IDs, mounts and resources.
func containerStates(cs []corev1.ContainerStatus) []corev1.ContainerStatus {
	if cs == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(cs))
	for _, c := range cs {
		out = append(out, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: c.State, LastTerminationState: c.LastTerminationState,
			Ready: c.Ready, Started: c.Started, RestartCount: c.RestartCount})
	}
	return out
}

// stripLogText drops the text of a cached log ConfigMap (the capture's):
// the capture reads from the cache only what the labels and annotations say
// of each log, and writes each log whole; at hundreds of nodes the texts
// would be much of what the manager holds.
func stripLogText(obj any) (any, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		shareMeta(&cm.ObjectMeta)
		if cm.Labels[v1beta1.LabelUpgradeLog] != "" {
			cm.BinaryData = nil
		}
	}
	return obj, nil
}

// stripVM keeps of a cached VM what the VM ledger reads: its run strategy,
// status and the toolkit's own annotations. Its template (disks, networks,
// devices) and the other annotations (Harvester keeps the volume claims'
// templates there, kilobytes of JSON) are most of a VM, and there is one
// per VM of the cluster. The manager changes VMs only by patches computed
// from the cached copy, which carry just the change.
func stripVM(obj any) (any, error) {
	if vm, ok := obj.(*kubevirtv1.VirtualMachine); ok {
		for k := range vm.Annotations {
			if !strings.HasPrefix(k, v1beta1.Prefix) {
				delete(vm.Annotations, k)
			}
		}
		vm.Labels = nil
		shareMeta(&vm.ObjectMeta)
		vm.Spec = kubevirtv1.VirtualMachineSpec{Running: vm.Spec.Running, RunStrategy: vm.Spec.RunStrategy}
	}
	return obj, nil
}

// stripVMI keeps of a cached VM instance its status (where it runs, its
// phase, its last migration): the spec is the VM's template again.
func stripVMI(obj any) (any, error) {
	if vmi, ok := obj.(*kubevirtv1.VirtualMachineInstance); ok {
		vmi.Annotations = nil
		shareMeta(&vmi.ObjectMeta)
		vmi.Spec = kubevirtv1.VirtualMachineInstanceSpec{}
	}
	return obj, nil
}

// stripLonghorn keeps of a cached Longhorn engine its replicas' modes and
// of a replica its node, with their names: what the counts of replicas
// being rebuilt read. There are several per volume; Longhorn's labels,
// annotations and owners on them are of no use to the manager.
func stripLonghorn(obj any) (any, error) {
	var m *metav1.ObjectMeta
	switch o := obj.(type) {
	case *longhornv1beta2.Engine:
		o.Spec, o.Status = longhornv1beta2.EngineSpec{}, longhornv1beta2.EngineStatus{ReplicaModeMap: o.Status.ReplicaModeMap}
		m = &o.ObjectMeta
	case *longhornv1beta2.Replica:
		o.Spec, o.Status = longhornv1beta2.ReplicaSpec{NodeID: o.Spec.NodeID}, longhornv1beta2.ReplicaStatus{}
		m = &o.ObjectMeta
	default:
		return obj, nil
	}
	m.Labels, m.Annotations, m.OwnerReferences = nil, nil, nil
	shareMeta(m)
	return obj, nil
}

// stripMeta is the transform of the kinds with an object per node that the
// manager reads only the metadata of (machine-plan Secrets) or reads little
// of beyond it (Machines): shareMeta.
func stripMeta(obj any) (any, error) {
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			shareMeta(m)
		}
	}
	return obj, nil
}

// shareMeta drops a cached object's managedFields and makes the strings its
// metadata repeats across objects (its namespace, the keys of its labels and
// annotations, the values of its labels, its owners' kinds) share one copy
// each: the API's decoder gives every object its own, and the objects of
// which there is one per node and per upgrade pod (Nodes, Jobs, pods, log
// ConfigMaps, machine plans) repeat them by the thousand. Values of
// annotations are mostly the object's own and stay as they are.
func shareMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.Namespace = shared(m.Namespace)
	m.Labels = shareMap(m.Labels, true)
	m.Annotations = shareMap(m.Annotations, false)
	for i := range m.OwnerReferences {
		o := &m.OwnerReferences[i]
		o.APIVersion, o.Kind = shared(o.APIVersion), shared(o.Kind)
	}
}

func shareMap(in map[string]string, values bool) map[string]string {
	if len(in) == 0 {
		return in
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if values {
			v = shared(v)
		}
		out[shared(k)] = v
	}
	return out
}

// shared returns the one copy of s that every cached object refers to.
func shared(s string) string { return unique.Make(s).Value() }

// What leader election needs: the Lease, and the events it records on it.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=harvester-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=events,verbs=create

// What the cache lists and watches: every kind the manager reads through
// its client, in the namespaces cacheOptions gives.
//
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=harvesterhci.io,resources=settings,verbs=list;watch
// +kubebuilder:rbac:groups=management.cattle.io,resources=settings,verbs=list;watch
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=configmaps;services,verbs=list;watch
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=pods,verbs=watch
// +kubebuilder:rbac:groups=apps,namespace=harvester-system,resources=deployments,verbs=list;watch
// +kubebuilder:rbac:groups=batch,namespace=harvester-system,resources=jobs,verbs=list;watch
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=harvester-system,resources=versions;virtualmachineimages,verbs=list;watch
// +kubebuilder:rbac:groups=kubevirt.io,namespace=harvester-system,resources=kubevirts,verbs=list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines;virtualmachineinstances;virtualmachineinstancemigrations,verbs=list;watch
// +kubebuilder:rbac:groups=batch,namespace=cattle-system,resources=jobs,verbs=list;watch
// +kubebuilder:rbac:groups=upgrade.cattle.io,namespace=cattle-system,resources=plans,verbs=list;watch
// +kubebuilder:rbac:groups="",namespace=fleet-local,resources=secrets,verbs=list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,namespace=fleet-local,resources=machines,verbs=list;watch
// +kubebuilder:rbac:groups=provisioning.cattle.io,namespace=fleet-local,resources=clusters,verbs=list;watch
// +kubebuilder:rbac:groups=management.cattle.io,namespace=fleet-local,resources=managedcharts,verbs=list;watch
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=settings,verbs=list;watch
// The addons' list is granted cluster-wide for the dry run (controller/dryrun.go).
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=kube-system,resources=addons,verbs=watch
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=cattle-monitoring-system,resources=addons,verbs=watch
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=harvester-system,resources=endpointslices,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=default,resources=endpointslices,verbs=list;watch

// cacheOptions keep the manager's memory and its permissions small: the
// cache holds each namespaced kind only in the namespace the toolkit works
// with it in, so that the manager lists and watches, for example, the
// Secrets of Rancher's machine plans but no other Secret; Jobs and pods only
// when they belong to an upgrade, and pods in cattle-system (the
// system-upgrade-controller Jobs') only to capture their logs.
func cacheOptions(upgradeLog bool, plans *planstatus.Store) cache.Options {
	byPlan := labels.NewSelector().Add(requirement(v1beta1.LabelUpgradePlan, selection.Exists))
	in := func(namespaces ...string) cache.ByObject {
		c := cache.ByObject{Namespaces: map[string]cache.Config{}}
		for _, ns := range namespaces {
			c.Namespaces[ns] = cache.Config{}
		}
		return c
	}
	serverVersion := fields.OneTermEqualSelector("metadata.name", cluster.ServerVersionSetting)
	harvester := in(cluster.HarvesterNamespace)
	fleetLocal := in(cluster.FleetLocalNamespace)
	jobs := in(cluster.HarvesterNamespace, cluster.CattleNamespace)
	jobs.Label = byPlan
	jobs.Transform = stripJob
	pods := in(cluster.HarvesterNamespace)
	if upgradeLog {
		pods = in(upgradelog.Namespaces...)
	}
	// A pod whose log the capture kept is done with: the API server drops
	// it from the watch, so that the cache holds the running and the
	// unfinished ones, not every pod of the upgrade (the cleanup, which
	// waits for every pod, asks the API server for the others).
	pods.Label = byPlan.Add(requirement(v1beta1.LabelLogCaptureDone, selection.DoesNotExist))
	pods.Transform = stripPod
	configMaps := harvester
	configMaps.Transform = stripLogText
	machines := in(cluster.FleetLocalNamespace)
	machines.Transform = stripMeta
	longhornInstances := in(cluster.LonghornNamespace)
	longhornInstances.Transform = stripLonghorn
	return cache.Options{
		// Plans are watched as metadata and read whole only when someone
		// else changed them (planstatus).
		NewInformer: plans.NewInformer,
		// Nothing reads managedFields; on a large cluster they are much of
		// every cached object.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Transform: stripNode},
			&batchv1.Job{}: jobs,
			&corev1.Pod{}:  pods,
			// Metadata only: see cluster.MachinePlan.
			cluster.MachinePlan(): {Namespaces: map[string]cache.Config{cluster.FleetLocalNamespace: {
				FieldSelector: fields.OneTermEqualSelector("type", cluster.MachinePlanSecretType),
			}}, Transform: stripMeta},
			&corev1.ConfigMap{}:                     configMaps,
			&corev1.Service{}:                       harvester,
			&appsv1.Deployment{}:                    harvester,
			&harvesterv1beta1.Version{}:             harvester,
			&harvesterv1beta1.VirtualMachineImage{}: harvester,
			&kubevirtv1.KubeVirt{}:                  harvester,
			// Every VM, for the plan's VM ledger: what it reads of them.
			&kubevirtv1.VirtualMachine{}:                  {Transform: stripVM},
			&kubevirtv1.VirtualMachineInstance{}:          {Transform: stripVMI},
			&kubevirtv1.VirtualMachineInstanceMigration{}: {Transform: stripMeta},
			&upgradev1.Plan{}:                             in(cluster.CattleNamespace),
			&capiv1beta1.Machine{}:                        machines,
			&provisioningv1.Cluster{}:                     fleetLocal,
			&managementv3.ManagedChart{}:                  fleetLocal,
			&longhornv1beta2.Setting{}:                    in(cluster.LonghornNamespace),
			&longhornv1beta2.Volume{}:                     in(cluster.LonghornNamespace),
			&longhornv1beta2.Engine{}:                     longhornInstances,
			&longhornv1beta2.Replica{}:                    longhornInstances,
			&harvesterv1beta1.Addon{}:                     in(cluster.KubeSystemNamespace, cluster.MonitoringNamespace),
			// Of the many settings, the plan reads the versions.
			&harvesterv1beta1.Setting{}:  {Field: serverVersion},
			&managementv3.Setting{}:      {Field: serverVersion},
			&discoveryv1.EndpointSlice{}: in(cluster.HarvesterNamespace, "default"),
		}}
}

// requirement is a constant label requirement: the key exists, or not.
func requirement(key string, op selection.Operator) labels.Requirement {
	r, err := labels.NewRequirement(key, op, nil)
	if err != nil {
		panic(err) // a constant, valid key
	}
	return *r
}
