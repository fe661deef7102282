package phase

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// Initialize records what the upgrade starts from (the Version snapshot, the
// running Harvester version, whether the cluster has a single node), runs
// the pre-flight checks that must pass before anything is disrupted, and
// records every VM in the plan's VM ledger.
type Initialize struct{}

// Name implements Phase.
func (Initialize) Name() string { return v1beta1.StepInitialize }

// Run implements Phase.
func (Initialize) Run(ctx context.Context, s *Scope) (Result, error) {
	if v := preflight.PlanName(s.Plan.Name); v.Result == v1beta1.CheckFailed {
		return FailFinal("metadata.name %q %s; create the plan again under such a name", s.Plan.Name, v.Message), nil
	}
	for _, step := range []func(context.Context, *Scope) (Result, error){
		snapshotVersion, recordPreviousVersion, detectSingleNode, checkDiskSpace, checkCerts, checkRisks, recordVMs,
	} {
		if r, err := step(ctx, s); err != nil || !r.Done {
			return r, err
		}
	}
	return Done(), nil
}

// snapshotVersion copies the Version's ISO URL and checksum into the status,
// once, so later edits of the Version do not change a running upgrade.
func snapshotVersion(ctx context.Context, s *Scope) (Result, error) {
	st := &s.Plan.Status
	if s.Plan.Spec.Image != nil || st.Version != nil {
		return Done(), nil
	}
	name := ptr.Deref(s.Plan.Spec.Version, "")
	v := &harvesterv1beta1.Version{}
	found, err := s.get(ctx, cluster.HarvesterNamespace, name, v)
	if err != nil {
		return Result{}, err
	}
	if !found {
		return s.boundedWait(s.Config.Deadlines.MissingObject,
			fmt.Sprintf("waiting for Version %s/%s to exist", cluster.HarvesterNamespace, name),
			fmt.Sprintf("Version %s/%s does not exist: create it and retry the plan, or create a new plan that names an existing Version or image", cluster.HarvesterNamespace, name)), nil
	}
	if v.Spec.ISOURL == "" {
		return FailFinal("Version %s/%s has no spec.isoURL: set the URL of the release ISO and create a new plan", v.Namespace, v.Name), nil
	}
	st.Version = &v1beta1.VersionSnapshot{ISOURL: v.Spec.ISOURL, ISOChecksum: v.Spec.ISOChecksum}
	return Done(), nil
}

// recordPreviousVersion records the running Harvester version.
func recordPreviousVersion(ctx context.Context, s *Scope) (Result, error) {
	if s.Plan.Status.PreviousVersion != nil {
		return Done(), nil
	}
	setting := &harvesterv1beta1.Setting{}
	found, err := s.get(ctx, "", cluster.ServerVersionSetting, setting)
	if err != nil {
		return Result{}, err
	}
	value := setting.Value
	if value == "" {
		value = setting.Default
	}
	if !found || value == "" {
		return s.boundedWait(s.Config.Deadlines.MissingObject,
			"waiting for the Harvester setting server-version to report the running version",
			"the Harvester setting server-version is missing or empty, so the running version is unknown: check that Harvester is healthy"), nil
	}
	s.Plan.Status.PreviousVersion = &value
	return Done(), nil
}

// detectSingleNode records the only managed node of a single-node cluster.
func detectSingleNode(ctx context.Context, s *Scope) (Result, error) {
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	switch len(nodes) {
	case 0:
		return FailFinal("no node carries the label %s=true: this does not look like a Harvester cluster", cluster.LabelManagedNode), nil
	case 1:
		s.Plan.Status.SingleNode = &nodes[0].Name
	default:
		s.Plan.Status.SingleNode = nil
	}
	return Done(), nil
}

// checkDiskSpace makes sure preloading the new images does not push any
// node past its kubelet's image garbage collection threshold. A kubelet that
// cannot be read is retried until a deadline before the plan fails.
func checkDiskSpace(ctx context.Context, s *Scope) (Result, error) {
	skip, err := s.Plan.SkipGCThresholdCheck()
	if err != nil {
		return FailFinal("%v", err), nil
	}
	if skip {
		return Done(), nil
	}
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	var disks []preflight.NodeDisk
	var unreachable []string
	for i := range nodes {
		n := &nodes[i]
		d, err := preflight.GatherNodeDisk(ctx, s.Config.Kubelet, n.Name)
		if err != nil {
			unreachable = append(unreachable, err.Error())
			continue
		}
		disks = append(disks, d)
	}
	if r := judgeRisks(s, preflight.DiskSpace(disks, preflight.NewImagesSize)); !r.Done {
		return r, nil
	}
	if len(unreachable) > 0 {
		return s.boundedWait(s.Config.Deadlines.Kubelet,
			"retrying the disk-space check: "+strings.Join(unreachable, "; "),
			"pre-flight disk-space check could not read every kubelet: "+strings.Join(unreachable, "; ")+
				"; make the nodes' kubelets reachable, or set the annotation "+v1beta1.AnnotationSkipGCThresholdCheck+": \"true\" to skip the check"), nil
	}
	return Done(), nil
}

// checkCerts makes sure the API server's certificates stay valid long enough
// for the upgrade.
func checkCerts(ctx context.Context, s *Scope) (Result, error) {
	minValidity := s.Config.MinCertValidity
	days, err := s.Plan.MinCertsExpirationInDay()
	if err != nil {
		return FailFinal("%v", err), nil
	}
	if days > 0 {
		minValidity = time.Duration(days) * 24 * time.Hour
	}
	addrs, err := preflight.APIServerAddresses(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	certs, errs := preflight.GatherServedCerts(ctx, s.Config.DialCerts, addrs)
	switch v := preflight.CertExpiry(certs, s.Clock.Now(), minValidity); v.Result {
	case v1beta1.CheckFailed:
		return judgeRisks(s, []preflight.Verdict{v}), nil
	case v1beta1.CheckPending:
		return s.boundedWait(s.Config.Deadlines.Kubelet,
			"retrying the certificate check: "+errors.Join(errs...).Error(),
			"pre-flight certificate check could not reach the API server: "+errors.Join(errs...).Error()), nil
	}
	return Done(), nil
}

// The risks Initialize judges again (preflight.GatherAdmissionFacts says
// what it reads).

// checkRisks judges the risks of the cluster's state again, as the webhook
// did when the plan was created: one that appeared since and that the plan
// does not accept fails it, naming the risk and how to accept it. Skipped
// with the webhook (skip-webhook), whose checks it repeats. It comes after
// the checks that wait (for kubelets, for the API server's certificates):
// it lists a score of kinds across the cluster, once when nothing waits
// any more rather than on every pass of a wait, and its verdict is the
// freshest before the ledger is written and the disruption begins.
func checkRisks(ctx context.Context, s *Scope) (Result, error) {
	if preflight.AdmissionChecksSkipped(s.Plan) {
		return Done(), nil
	}
	facts, err := preflight.GatherAdmissionFacts(ctx, s.APIReader, s.Plan, s.Config.Alerts, s.Clock.Now())
	if err != nil {
		return Result{}, err
	}
	return judgeRisks(s, preflight.Risks(s.Plan, facts)), nil
}

// judgeRisks fails the plan on the Error-level risks among verdicts that
// it does not accept, and records those it accepts in status.acceptedRisks.
func judgeRisks(s *Scope, verdicts []preflight.Verdict) Result {
	var refused []string
	for _, v := range verdicts {
		switch {
		case v.Result != v1beta1.CheckFailed:
		case preflight.Accepted(s.Plan, v.Reason):
			s.acceptRisk(v)
		default:
			refused = append(refused, preflight.RiskRefusal(v))
		}
	}
	if len(refused) > 0 {
		return Fail("pre-flight check failed: %s; then retry the plan", strings.Join(refused, "; "))
	}
	return Done()
}

// acceptRisk records a risk found and accepted, once per name: the first
// finding is the one the operator went on with.
func (s *Scope) acceptRisk(v preflight.Verdict) {
	st := &s.Plan.Status
	if slices.ContainsFunc(st.AcceptedRisks, func(a v1beta1.AcceptedRisk) bool { return a.Name == string(v.Reason) }) {
		return
	}
	st.AcceptedRisks = append(st.AcceptedRisks, v1beta1.AcceptedRisk{
		Name: string(v.Reason), Level: v.Level(), Message: v.Message, AcceptedAt: metav1.NewTime(s.Now()),
	})
	s.Event(corev1.EventTypeWarning, v1beta1.EventRiskAccepted, "%s", preflight.RiskAcceptedMessage(v))
}

// The ledger's first record: every VM and instance, read from the API
// server once.
//
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines;virtualmachineinstances,verbs=list
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=configmaps,verbs=get;create;update

// recordVMs records every VM as the upgrade starts, in the plan's VM ledger
// (internal/vmledger): whether and where it runs, and how it will leave its
// node. Once: a ledger that exists is the record, kept as it is.
func recordVMs(ctx context.Context, s *Scope) (Result, error) {
	key := vmledger.Key(s.Plan.Name)
	if found, err := s.get(ctx, key.Namespace, key.Name, &corev1.ConfigMap{}, client.UnsafeDisableDeepCopy); err != nil || found {
		return Done(), err
	}
	var vms kubevirtv1.VirtualMachineList
	if err := s.APIReader.List(ctx, &vms); err != nil {
		return Result{}, fmt.Errorf("listing the VMs to record them: %w", err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := s.APIReader.List(ctx, &vmis); err != nil {
		return Result{}, fmt.Errorf("listing the VMs' instances to record them: %w", err)
	}
	var nodes corev1.NodeList
	if err := s.Client.List(ctx, &nodes); err != nil {
		return Result{}, err
	}
	cms, err := vmledger.NewConfigMaps(s.Plan, vmledger.Snapshot(s.Now(), vms.Items, vmis.Items, nodes.Items, s.Plan.RestoreVMEnabled()))
	if err != nil {
		return Result{}, err
	}
	// The first last: it says the ledger is whole. A later part left by a
	// try that stopped before it is of an older look: replaced.
	for i := len(cms) - 1; i >= 0; i-- {
		if err := createOrReplace(ctx, s, cms[i], i > 0); err != nil {
			return Result{}, fmt.Errorf("creating the VM ledger %s: %w", vmledger.ShardKey(s.Plan.Name, i), err)
		}
	}
	return Done(), nil
}

// createOrReplace creates a ConfigMap; one that exists is replaced when
// replace says so, else kept.
func createOrReplace(ctx context.Context, s *Scope, cm *corev1.ConfigMap, replace bool) error {
	err := s.Client.Create(ctx, cm)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	if !replace {
		return nil
	}
	old := &corev1.ConfigMap{}
	if err := s.APIReader.Get(ctx, client.ObjectKeyFromObject(cm), old); err != nil {
		return err
	}
	cm.ResourceVersion = old.ResourceVersion
	return s.Client.Update(ctx, cm)
}

// failures are the messages of the verdicts that failed.
func failures(verdicts []preflight.Verdict) []string {
	var out []string
	for _, v := range verdicts {
		if v.Result == v1beta1.CheckFailed {
			out = append(out, v.Message)
		}
	}
	return out
}
