package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
)

// Config describes the simulated cluster and how its actors behave. Start
// fills unset fields with the defaults documented on each field.
type Config struct {
	// Nodes is the number of managed (non-witness) nodes; at least 1.
	Nodes int
	// Witness adds a witness node (etcd only, no workloads).
	Witness bool
	// From is the release the cluster runs: Harvester (default v1.7.1),
	// Kubernetes (default v1.34.4+rke2r1), OS (default "Harvester
	// <Harvester>") and Rancher (default v2.12.3).
	From v1beta1.ReleaseMetadata
	// To is the release a Version object describes and the repo serves
	// (default v1.8.0 with Kubernetes v1.35.2+rke2r1, minimum upgradable
	// version v1.7.0); unset fields are derived from To.Harvester.
	To v1beta1.ReleaseMetadata
	// KubeVirtVersion is what the KubeVirt object reports (default v1.6.0).
	KubeVirtVersion string

	// VMs lists the virtual machines. When nil, VMsPerNode migratable VMs are
	// placed on every managed node, plus NonMigratableVMs that cannot move
	// (alternately pinned by a nodeSelector and holding a host device).
	VMs []VM
	// VMsPerNode is the number of migratable VMs per managed node when VMs is
	// nil (default 2; negative for none).
	VMsPerNode int
	// NonMigratableVMs is the number of VMs that cannot live-migrate when VMs
	// is nil (default 1 with more than one node; negative for none).
	NonMigratableVMs int
	// VolumesPerNode is the number of Longhorn volumes per managed node
	// (default 1; negative for none). Replicas spread over up to three nodes.
	VolumesPerNode int
	// DegradedVolumes is how many of the volumes (the first ones) have a
	// replica on a node that is gone (LostReplicaNode): Longhorn reports
	// them degraded until someone rebuilds the replica, which never happens
	// here.
	DegradedVolumes int

	// Disk is what every node's kubelet reports (default: 500 GiB, 100 GiB
	// used, image GC threshold 85%); DiskByNode overrides it per node.
	Disk       Disk
	DiskByNode map[string]Disk
	// NoKubelet runs no kubelets: nodes get no kubelet endpoint, so the
	// toolkit's disk-space check must be skipped. Use it where the machine has
	// no global-unicast address (see KubeletAddress).
	NoKubelet bool

	// Timing is how long each step takes (zero: instant).
	Timing Timing
	// Faults are injected from the start; SetFaults changes them later.
	Faults FaultSet
	// ClusterUpgradeTimeouts replaces the real cluster-upgrade Job's bounds
	// (default: ClusterUpgradeTimeouts).
	ClusterUpgradeTimeouts *clusterupgrade.Timeouts
	// JobWork replaces the work of a job type, the toolkit's own job code,
	// e.g. with a test's stand-in.
	JobWork map[string]JobWork
	// ReleaseTree is the content the repo serves, by path relative to
	// release.RepoRoot (e.g. releasetest.New().Files()). Nil: releasetest's
	// ISO with the From and To versions. Its image list of the From release
	// is what every node's containerd holds at the start.
	ReleaseTree fs.FS
	// NodeImages are images every node holds besides the running
	// release's: the operator's own workloads'.
	NodeImages []string
	// RegistryImages are what the registries the nodes reach hold, by full
	// reference (registry.example.test:5000/rancher/x:v1): the nodes pull
	// them, directly or through a mirror of Harvester's containerd-registry
	// setting. None by default: the cluster is air-gapped.
	RegistryImages []string
}

// VM is one virtual machine of the simulated cluster.
type VM struct {
	Namespace, Name string
	// Node is where its instance runs.
	Node string
	// Pinned adds a nodeSelector on the node's hostname, which makes the VM
	// non-migratable for Harvester.
	Pinned bool
	// HostDevice passes a PCI device through, which makes the VM
	// non-migratable for KubeVirt and Harvester.
	HostDevice bool
	// RunStrategy is Always (default), RerunOnFailure, Manual or Halted.
	RunStrategy string
	// EvictionStrategy is LiveMigrateIfPossible (default, as Harvester sets
	// it), LiveMigrate, None or External.
	EvictionStrategy string
	// Paused: its instance was paused (virtctl pause) and reports
	// Paused=True; it stays paused where it runs or migrates to.
	Paused bool
}

// Disk is a node's root filesystem as its kubelet reports it.
type Disk struct {
	CapacityBytes, UsedBytes uint64
	// ImageGCHighThresholdPercent is the kubelet's image GC threshold.
	ImageGCHighThresholdPercent int32
}

const gib = 1 << 30

func (c *Config) setDefaults() {
	if c.From.Harvester == "" {
		c.From.Harvester = "v1.7.1"
	}
	if c.From.Kubernetes == "" {
		c.From.Kubernetes = "v1.34.4+rke2r1"
	}
	if c.From.OS == "" {
		c.From.OS = "Harvester " + c.From.Harvester
	}
	if c.From.Rancher == "" {
		c.From.Rancher = "v2.12.3"
	}
	if c.To.Harvester == "" {
		c.To.Harvester = "v1.8.0"
	}
	if c.To.Kubernetes == "" {
		c.To.Kubernetes = "v1.35.2+rke2r1"
	}
	if c.To.OS == "" {
		c.To.OS = "Harvester " + c.To.Harvester
	}
	if c.To.HarvesterChart == "" {
		c.To.HarvesterChart = strings.TrimPrefix(c.To.Harvester, "v")
	}
	if c.To.Rancher == "" {
		c.To.Rancher = "v2.14.0"
	}
	if c.To.MonitoringChart == "" {
		c.To.MonitoringChart = "108.0.2+up77.9.1-rancher.11"
	}
	if c.To.MinUpgradableVersion == "" {
		c.To.MinUpgradableVersion = "v1.7.0"
	}
	if c.KubeVirtVersion == "" {
		c.KubeVirtVersion = "v1.6.0"
	}
	if c.VMsPerNode == 0 {
		c.VMsPerNode = 2
	}
	if c.NonMigratableVMs == 0 && c.Nodes > 1 {
		c.NonMigratableVMs = 1
	}
	if c.VolumesPerNode == 0 {
		c.VolumesPerNode = 1
	}
	if c.Disk == (Disk{}) {
		c.Disk = Disk{CapacityBytes: 500 * gib, UsedBytes: 100 * gib, ImageGCHighThresholdPercent: 85}
	}
	if c.VMs == nil {
		c.VMs = defaultVMs(c.nodeNames(), c.VMsPerNode, c.NonMigratableVMs)
	}
	for i := range c.VMs {
		if c.VMs[i].Namespace == "" {
			c.VMs[i].Namespace = "default"
		}
		if c.VMs[i].RunStrategy == "" {
			c.VMs[i].RunStrategy = runStrategyAlways
		}
		if c.VMs[i].EvictionStrategy == "" {
			c.VMs[i].EvictionStrategy = evictionLiveMigrateIfPossible
		}
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Nodes < 1 {
		errs = append(errs, fmt.Errorf("sim: Config.Nodes is %d: a cluster needs at least one managed node", c.Nodes))
	}
	nodes := map[string]bool{}
	for _, n := range c.nodeNames() {
		nodes[n] = true
	}
	seen := map[string]bool{}
	for _, vm := range c.VMs {
		key := vm.Namespace + "/" + vm.Name
		switch {
		case vm.Name == "":
			errs = append(errs, errors.New("sim: a VM in Config.VMs has no name"))
		case seen[key]:
			errs = append(errs, fmt.Errorf("sim: VM %s is listed twice in Config.VMs", key))
		case !nodes[vm.Node]:
			errs = append(errs, fmt.Errorf("sim: VM %s is placed on node %q, which is not a managed node (%s)", key, vm.Node, strings.Join(c.nodeNames(), ", ")))
		}
		seen[key] = true
		switch vm.RunStrategy {
		case runStrategyAlways, runStrategyRerunOnFailure, runStrategyManual, runStrategyHalted:
		default:
			errs = append(errs, fmt.Errorf("sim: VM %s has run strategy %q: use Always, RerunOnFailure, Manual or Halted", key, vm.RunStrategy))
		}
	}
	faulty := map[string]string{}
	for _, m := range c.Faults.Migrations {
		faulty[m.VM] = "FaultSet.Migrations"
	}
	for _, vm := range c.Faults.ForcedDrain {
		faulty[vm] = "FaultSet.ForcedDrain"
	}
	for _, vm := range c.Faults.OwnerStops {
		faulty[vm] = "FaultSet.OwnerStops"
	}
	for vm, knob := range faulty {
		if !seen[vm] {
			errs = append(errs, fmt.Errorf("sim: %s names VM %q, which Config.VMs does not have: name a VM as namespace/name", knob, vm))
		}
	}
	for node := range c.DiskByNode {
		if !nodes[node] && node != c.witnessName() {
			errs = append(errs, fmt.Errorf("sim: Config.DiskByNode names node %q, which the cluster does not have", node))
		}
	}
	return errors.Join(errs...)
}

// nodeNames returns the managed, non-witness nodes: node-1 … node-N.
func (c *Config) nodeNames() []string {
	names := make([]string, 0, c.Nodes)
	for i := 1; i <= c.Nodes; i++ {
		names = append(names, fmt.Sprintf("node-%d", i))
	}
	return names
}

func (c *Config) witnessName() string { return "witness-1" }

// allNodeNames returns every node, the witness last.
func (c *Config) allNodeNames() []string {
	names := c.nodeNames()
	if c.Witness {
		names = append(names, c.witnessName())
	}
	return names
}

func (c *Config) disk(node string) Disk {
	if d, ok := c.DiskByNode[node]; ok {
		return d
	}
	return c.Disk
}

// defaultVMs spreads perNode migratable VMs over every node and adds
// nonMigratable VMs on the first nodes, alternately pinned and holding a host
// device.
func defaultVMs(nodes []string, perNode, nonMigratable int) []VM {
	var vms []VM
	for _, n := range nodes {
		for i := 1; i <= perNode; i++ {
			vms = append(vms, VM{Name: fmt.Sprintf("vm-%s-%d", n, i), Node: n})
		}
	}
	for i := 0; i < nonMigratable; i++ {
		n := nodes[i%len(nodes)]
		vm := VM{Name: fmt.Sprintf("pinned-%s-%d", n, i+1), Node: n, Pinned: i%2 == 0, HostDevice: i%2 == 1}
		if vm.HostDevice {
			vm.Name = fmt.Sprintf("passthrough-%s-%d", n, i+1)
		}
		vms = append(vms, vm)
	}
	return vms
}
