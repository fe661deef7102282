// Package names derives the names of the objects a plan creates. Names are
// deterministic, so a restarted controller finds what it created before, and
// the node jobs, the simulator and the controller agree on them.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// MaxLength is the longest name that is also a valid label value and DNS
// label (Service and Job names end up in both).
const MaxLength = 63

// Join joins the parts with "-". A result longer than 63 characters is cut
// and given a suffix made from a hash of the whole, so that distinct long
// inputs stay distinct and the result still ends in a letter or digit.
func Join(parts ...string) string {
	full := strings.Join(parts, "-")
	if len(full) <= MaxLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	suffix := hex.EncodeToString(sum[:])[:8]
	head := strings.TrimRight(full[:MaxLength-len(suffix)-1], "-.")
	return head + "-" + suffix
}

// ISOImage is the VirtualMachineImage that downloads the release ISO.
func ISOImage(plan string) string { return Join(plan, "iso") }

// Repo is the Deployment and Service that serve the ISO's content.
func Repo(plan string) string { return Join(plan, "repo") }

// ImagePreloadPlan is the system-upgrade-controller Plan that preloads images.
func ImagePreloadPlan(plan string) string { return Join(plan, v1beta1.ComponentImagePreload) }

// ImageCleanupPlan is the system-upgrade-controller Plan that removes the
// previous release's images.
func ImageCleanupPlan(plan string) string { return Join(plan, v1beta1.ComponentImageCleanup) }

// ClusterUpgradeJob is the Job that upgrades the cluster's components.
func ClusterUpgradeJob(plan string) string { return Join(plan, v1beta1.ComponentClusterUpgrade) }

// NodeJob is a per-node Job of the given type (pre-drain, post-drain,
// single-node-upgrade, restore-vm).
func NodeJob(plan, jobType, node string) string {
	return Join(plan, v1beta1.ComponentNodeUpgrade, jobType, node)
}

// RestoreVMConfigMap records, per node, the VMs shut down for the upgrade.
func RestoreVMConfigMap(plan string) string { return Join(plan, "restore-vm") }

// VMLedger records every VM the plan found when it started, and what the
// upgrade did to each (internal/vmledger).
func VMLedger(plan string) string { return Join(plan, "vm-ledger") }

// ClusterUpgradeProgress is the ConfigMap in which the cluster-upgrade Job
// records the steps it finished, so that a restarted pod resumes after them.
func ClusterUpgradeProgress(plan string) string { return Join(plan, v1beta1.ComponentClusterUpgrade) }

// JobContainer is the name of the container of every Job a plan creates;
// the node jobs' reboot unit waits for it to exit.
const JobContainer = "apply"

// MaxListed is the most names a message lists: a message must not grow
// with the cluster (it is written with a status on every change of it).
const MaxListed = 10

// List joins names for a message, at most MaxListed of them, then how many
// more there are.
func List(names []string) string {
	if len(names) <= MaxListed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:MaxListed], ", "), len(names)-MaxListed)
}
