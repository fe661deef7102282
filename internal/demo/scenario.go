// Package demo runs a whole upgrade of a simulated Harvester cluster and
// shows it live: the README's first command on a fresh machine.
package demo

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/sim"
)

// Options choose the scenario.
type Options struct {
	// Nodes is the number of managed nodes; 1 runs the single-node path.
	Nodes int
	// Witness adds a witness node.
	Witness bool
	// Pause lists nodes held by spec.nodeUpgradeOption.pauseNodes; they are
	// released after ResumeAfter.
	Pause       []string
	ResumeAfter time.Duration
	// RestoreVM sets spec.restoreVM.
	RestoreVM bool
	// Fault injects a failure (see Faults).
	Fault string
	// Fast runs every simulated step instantly instead of at a watchable pace.
	Fast bool
	// Restart kills and restarts the manager at a random moment of each phase.
	Restart bool
	// Seed makes the restarts reproducible.
	Seed int64
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Archive is a file to write the plan's support bundle to at the end
	// (upgrade-toolkit logs PLAN --archive); "" writes none.
	Archive string
}

// faultNode is the node a node fault strikes.
const faultNode = "node-2"

// Faults are the failures the demo can inject, by name.
var Faults = map[string]string{
	"iso-import":      "the ISO download fails after Harvester's retries",
	"preload":         "the image preload Job of " + faultNode + " fails",
	"cluster-upgrade": "the cluster-upgrade Job fails",
	"pre-drain":       "the pre-drain Job of " + faultNode + " fails",
	"post-drain":      "the post-drain Job of " + faultNode + " fails",
	"single-node":     "the single-node upgrade Job fails (use with --nodes 1)",
	"image-cleanup":   "the image cleanup Job of " + faultNode + " fails",
	"node-lost":       faultNode + " never comes back from its reboot",
	// Steps that report success while their effect is missing: the toolkit
	// must catch each itself and fail, never end Succeeded.
	"empty-cluster-upgrade": "the cluster-upgrade Job exits 0 having upgraded nothing",
	"stuck-version":         "Harvester never reports the new version, although its chart was deployed",
	"fallback-boot":         faultNode + " comes back from its reboot on its old OS image",
	"plan-never-applies":    "Rancher never applies the RKE2 plan of " + faultNode,
	"old-kubelet":           faultNode + "'s kubelet keeps its old version after Rancher applied the plan",
	"empty-post-drain":      "the post-drain Job of " + faultNode + " exits 0 having done nothing (use --nodes 1 for the single-node Job)",
	// A helper must never cost the upgrade.
	"kubelets-refuse": "every node's kubelet refuses the API server (logs, stats): the logs are kept as far as read and marked incomplete, the disk-space check is skipped",
}

// FaultNames lists the fault names, sorted.
func FaultNames() []string {
	var out []string
	for k := range Faults {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// simConfig builds the simulated cluster for the options.
func (o Options) simConfig() (sim.Config, error) {
	cfg := sim.Config{Nodes: o.Nodes, Witness: o.Witness}
	if !o.Fast {
		cfg.Timing = sim.DemoTiming()
	}
	node := faultNode
	if o.Nodes == 1 {
		node = "node-1"
	}
	// Exit code 4, a wait that gave up: the toolkit's Jobs fail at once on it
	// (system-upgrade-controller's are retried up to their backoff limit).
	job := func(t string) sim.FaultSet {
		return sim.FaultSet{FailJobs: []sim.JobFault{{Type: t, Node: node, ExitCode: 4, Message: "gave up waiting after 30m"}}}
	}
	switch o.Fault {
	case "":
	case "iso-import":
		cfg.Faults.FailImport = &sim.ImportFault{Message: "failed to download https://releases.example.com/harvester.iso: 404 Not Found"}
	case "preload":
		cfg.Faults = job(sim.JobImagePreload)
	case "cluster-upgrade":
		cfg.Faults = sim.FaultSet{FailJobs: []sim.JobFault{{Type: sim.JobClusterUpgrade, ExitCode: 4, Message: "gave up waiting for Rancher after 30m"}}}
	case "pre-drain":
		cfg.Faults = job(sim.JobPreDrain)
	case "post-drain":
		cfg.Faults = job(sim.JobPostDrain)
	case "single-node":
		cfg.Faults = job(sim.JobSingleNodeUpgrade)
	case "image-cleanup":
		cfg.Faults = job(sim.JobImageCleanup)
	case "node-lost":
		cfg.Faults.NeverReturn = []string{node}
	case "empty-cluster-upgrade":
		cfg.Faults.EmptyJobs = []sim.JobFault{{Type: sim.JobClusterUpgrade}}
	case "stuck-version":
		cfg.Faults.StuckVersion = true
	case "fallback-boot":
		cfg.Faults.FallbackBoot = []string{node}
	case "plan-never-applies":
		cfg.Faults.PlanNeverApplies = []string{node}
	case "old-kubelet":
		cfg.Faults.KubeletStaysOld = []string{node}
	case "kubelets-refuse":
		cfg.Faults.KubeletsRefuse = nodeNames(o.Nodes)
	case "empty-post-drain":
		t := sim.JobPostDrain
		if o.Nodes == 1 {
			t = sim.JobSingleNodeUpgrade
		}
		cfg.Faults.EmptyJobs = []sim.JobFault{{Type: t, Node: node}}
	default:
		return cfg, fmt.Errorf("unknown fault %q: use one of %s", o.Fault, strings.Join(FaultNames(), ", "))
	}
	if slices.Contains([]string{"pre-drain", "post-drain", "node-lost", "plan-never-applies", "old-kubelet"}, o.Fault) && o.Nodes < 2 {
		return cfg, fmt.Errorf("fault %q needs at least 2 nodes", o.Fault)
	}
	if o.Fault == "single-node" && o.Nodes != 1 {
		return cfg, fmt.Errorf("fault %q needs --nodes 1", o.Fault)
	}
	for _, p := range o.Pause {
		if !slices.Contains(nodeNames(o.Nodes), p) {
			return cfg, fmt.Errorf("cannot pause %q: the nodes are %s", p, strings.Join(nodeNames(o.Nodes), ", "))
		}
	}
	return cfg, nil
}

// planAnnotations are the annotations of the UpgradePlan the demo creates:
// with kubelets that refuse, their disk space cannot be read, and the check
// is skipped as an operator would.
func (o Options) planAnnotations() map[string]string {
	if o.Fault == "kubelets-refuse" {
		return map[string]string{v1beta1.AnnotationSkipGCThresholdCheck: "true"}
	}
	return nil
}

// planSpec is the UpgradePlan the demo creates.
func (o Options) planSpec() v1beta1.UpgradePlanSpec {
	spec := v1beta1.UpgradePlanSpec{RestoreVM: ptr.To(o.RestoreVM)}
	if len(o.Pause) > 0 {
		spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: o.Pause}
	}
	return spec
}

func nodeNames(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("node-%d", i))
	}
	return out
}
