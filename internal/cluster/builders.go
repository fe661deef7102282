package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
)

// NewISOImage builds a VirtualMachineImage that makes Harvester download a
// release ISO through CDI into the longhorn-static storage class.
func NewISOImage(namespace, name, displayName, url, checksum string) *harvesterv1beta1.VirtualMachineImage {
	return &harvesterv1beta1.VirtualMachineImage{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   namespace,
			Name:        name,
			Annotations: map[string]string{AnnotationOSUpgradeImage: "True"},
		},
		Spec: harvesterv1beta1.VirtualMachineImageSpec{
			DisplayName:            displayName,
			SourceType:             "download",
			URL:                    url,
			Checksum:               checksum,
			Retry:                  3,
			Backend:                "cdi",
			TargetStorageClassName: LonghornStaticStorageClass,
		},
	}
}

// ImportState is where the import of a VirtualMachineImage stands.
type ImportState int

// The import states.
const (
	Importing ImportState = iota
	Imported
	ImportFailed
)

// ImageImport reads the import state of an image from its conditions: done
// when Imported is True; failed when Harvester gave up (RetryLimitExceeded)
// or reported a failure without retrying; importing otherwise. The message
// is Harvester's.
func ImageImport(img *harvesterv1beta1.VirtualMachineImage) (ImportState, string) {
	conds := img.Status.Conditions
	if common.IsTrue(conds, "Imported") {
		return Imported, ""
	}
	if c := common.FindCondition(conds, "RetryLimitExceeded"); c != nil && c.Status == "True" {
		return ImportFailed, firstNonEmpty(c.Message, importedMessage(conds))
	}
	if c := common.FindCondition(conds, "Imported"); c != nil && c.Status == "False" {
		if common.FindCondition(conds, "RetryLimitExceeded") == nil {
			return ImportFailed, c.Message
		}
		return Importing, fmt.Sprintf("retrying after a failed attempt: %s", c.Message)
	}
	return Importing, ""
}

func importedMessage(conds []common.Condition) string {
	if c := common.FindCondition(conds, "Imported"); c != nil {
		return c.Message
	}
	return ""
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// OnNode is the affinity of a pod that must run on node ("" for none): a
// required node affinity on the node's name, which the scheduler checks
// against the node's taints, cordon and resources, as it does for
// DaemonSet pods. Setting spec.nodeName instead would skip the scheduler,
// and a pod that cannot run there would fail at the kubelet, or never
// start, without saying why.
func OnNode(node string) *corev1.Affinity {
	if node == "" {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}},
	}}}
}

// UpgradeTolerations lets upgrade workloads run on every node of a Harvester
// cluster, including cordoned, draining and control-plane nodes.
func UpgradeTolerations() []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: TaintEtcd, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: TaintKubeVirtDrain, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
	}
}

// SUCPlanSpec is what a system-upgrade-controller Plan of the toolkit runs.
type SUCPlanSpec struct {
	Concurrency     int64
	DeadlineSeconds int64
	NodeSelector    map[string]string
	// SkipHostnames are nodes (their kubernetes.io/hostname labels) the
	// selector leaves out.
	SkipHostnames []string
	// OnlyHostnames, when set, are the only nodes (their
	// kubernetes.io/hostname labels) the selector takes.
	OnlyHostnames      []string
	ServiceAccountName string
	Image              string
	Command            []string
	Env                []corev1.EnvVar
	// Version feeds SUC's plan hash; jobs rerun when it changes.
	Version string
}

// Hostname is a node's kubernetes.io/hostname label, which node selectors
// (system-upgrade-controller's Plans among them) match, or its name.
func Hostname(n *corev1.Node) string {
	if h := n.Labels[corev1.LabelHostname]; h != "" {
		return h
	}
	return n.Name
}

func sucNodeSelector(s SUCPlanSpec) *metav1.LabelSelector {
	sel := &metav1.LabelSelector{MatchLabels: s.NodeSelector}
	if len(s.SkipHostnames) > 0 {
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpNotIn, Values: s.SkipHostnames})
	}
	if len(s.OnlyHostnames) > 0 {
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpIn, Values: s.OnlyHostnames})
	}
	return sel
}

// NewSUCPlan builds a Plan that runs one privileged Job per selected node,
// with the host root mounted at /host.
func NewSUCPlan(namespace, name string, s SUCPlanSpec) *upgradev1.Plan {
	return &upgradev1.Plan{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: upgradev1.PlanSpec{
			Concurrency:           s.Concurrency,
			JobActiveDeadlineSecs: &s.DeadlineSeconds,
			NodeSelector:          sucNodeSelector(s),
			ServiceAccountName:    s.ServiceAccountName,
			Version:               s.Version,
			Tolerations:           UpgradeTolerations(),
			Upgrade: &upgradev1.ContainerSpec{
				Image:   s.Image,
				Command: s.Command,
				Envs:    s.Env,
			},
		},
	}
}

// SUCJobNode returns the node a system-upgrade-controller Job runs on.
func SUCJobNode(labels map[string]string) string { return labels[LabelSUCNode] }

// LabelSUCPlanNode is the label SUC puts on a node once the plan's Job on it
// succeeded; its value is the plan's status.latestHash.
func LabelSUCPlanNode(plan string) string { return "plan.upgrade.cattle.io/" + plan }

// ISOImageOf reads the VirtualMachineImage of that name in harvester-system.
func ISOImageOf(ctx context.Context, c client.Reader, name string) (*harvesterv1beta1.VirtualMachineImage, error) {
	img := &harvesterv1beta1.VirtualMachineImage{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: HarvesterNamespace, Name: name}, img); err != nil {
		return nil, fmt.Errorf("reading the ISO's VirtualMachineImage %s/%s: %w", HarvesterNamespace, name, err)
	}
	return img, nil
}
