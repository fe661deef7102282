// Package jobspec is the contract between the manager and the Jobs it
// starts: which job types there are, the command line each one runs, the
// environment variables it reads, the exit codes it ends with and the keys
// of the cluster-upgrade Job's progress ConfigMap. Both sides use it: the
// phases that build the Jobs and read their outcome, the job code
// (internal/nodejob, internal/clusterupgrade, restore-vm), the commands of
// cmd/upgrade-toolkit and the simulator that runs the job code in-process.
// Nothing else spells a job's argument, variable or exit code.
//
// The job types that are also label values (management.harvesterhci.io/
// job-type) are named by api/v1beta1, the names outside the process; the
// others are spelled here.
package jobspec

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Program is the toolkit's binary, which every Job runs.
const Program = "upgrade-toolkit"

// The subcommands the Jobs run.
const (
	// CommandNode runs a node job: `upgrade-toolkit node <type>`.
	CommandNode = "node"
	// CommandClusterUpgrade runs the cluster-upgrade Job.
	CommandClusterUpgrade = "cluster-upgrade"
	// CommandRestoreVM runs a restore-vm Job:
	// `upgrade-toolkit restore-vm --node <node> --upgrade <plan>`.
	CommandRestoreVM = "restore-vm"
)

// The node job types: the argument of `upgrade-toolkit node`.
const (
	// Prepare runs on every node through the image-preload Plan.
	Prepare = "prepare"
	// PreDrain, PostDrain and SingleNodeUpgrade are the node upgrade's
	// Jobs, one per node.
	PreDrain          = v1beta1.JobTypePreDrain
	PostDrain         = v1beta1.JobTypePostDrain
	SingleNodeUpgrade = v1beta1.JobTypeSingleNodeUpgrade
	// ImageCleanup runs on every node through the image-cleanup Plan.
	ImageCleanup = "image-cleanup"
)

// NodeTypes lists the node job types in the order of an upgrade.
var NodeTypes = []string{Prepare, PreDrain, PostDrain, SingleNodeUpgrade, ImageCleanup}

// EvacuationWait is how long a pre-drain Job waits for its node's VMs to
// leave before it fails: the plan tells the operator of a node held for a
// VM whose migration fails when the node will fail.
const EvacuationWait = 45 * time.Minute

// RestoreVM is the restore-vm Job's type (its job-type label).
const RestoreVM = v1beta1.JobTypeRestoreVM

// The flags of restore-vm.
const (
	FlagNode    = "node"
	FlagUpgrade = "upgrade"
)

// NodeCommand is the command line of a node job of the given type.
func NodeCommand(jobType string) []string { return []string{Program, CommandNode, jobType} }

// ClusterUpgradeCommand is the command line of the cluster-upgrade Job.
func ClusterUpgradeCommand() []string { return []string{Program, CommandClusterUpgrade} }

// RestoreVMCommand is the command line of the Job that starts again the VMs
// shut down for node's upgrade by plan.
func RestoreVMCommand(node, plan string) []string {
	return []string{Program, CommandRestoreVM, "--" + FlagNode, node, "--" + FlagUpgrade, plan}
}

// The environment variables the jobs read.
const (
	// EnvPlan names the UpgradePlan: every Job and Plan of the upgrade
	// sets it.
	EnvPlan = "HARVESTER_UPGRADEPLAN_NAME"
	// EnvNode and EnvPod name the node and the job's own pod, for the
	// node upgrade's Jobs.
	EnvNode = "HARVESTER_UPGRADE_NODE_NAME"
	EnvPod  = "HARVESTER_UPGRADE_POD_NAME"
	// EnvSUCNode and EnvSUCPod are what system-upgrade-controller sets in
	// the Jobs of its Plans, in their place.
	EnvSUCNode = "SYSTEM_UPGRADE_NODE_NAME"
	EnvSUCPod  = "SYSTEM_UPGRADE_POD_NAME"
)

// PlanEnv is the variable that names the plan.
func PlanEnv(plan string) corev1.EnvVar { return corev1.EnvVar{Name: EnvPlan, Value: plan} }

// NodeEnv are the variables of a node upgrade's Job on node: the node, and
// the pod's own name from the downward API.
func NodeEnv(node string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: EnvNode, Value: node},
		{Name: EnvPod, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
}
