package phase

import (
	"fmt"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

// Config is how the manager runs the phases. DefaultConfig gives production
// values; tests and the simulator replace the parts that reach outside the
// API server.
type Config struct {
	// ToolkitRepository is the repository of the upgrade-toolkit image,
	// unless a plan's annotation overrides it.
	ToolkitRepository string
	// Version is the manager's own version: the image tag used when the
	// release is not known.
	Version string
	// ImageMirror, when set, is the registry every workload's image is
	// pulled from (internal/images).
	ImageMirror images.Mirror
	// JobServiceAccount runs the node and restore-vm Jobs.
	JobServiceAccount string
	// ClusterUpgradeServiceAccount runs the cluster-upgrade Job, which
	// upgrades Rancher with Helm and so needs to write any cluster object.
	ClusterUpgradeServiceAccount string
	// PlanServiceAccount runs the system-upgrade-controller Plans' Jobs.
	PlanServiceAccount string
	// RepoURL maps the repo Service to the base URL of the ISO content.
	RepoURL func(namespace, service string) string
	// Kubelet reads kubelet endpoints for the disk-space check.
	Kubelet preflight.Kubelet
	// DialCerts reads the certificates the API server serves.
	DialCerts preflight.CertDialer
	// Alerts, when set, gives the alerts firing, for the risk
	// CriticalAlertFiring at Initialize.
	Alerts preflight.AlertSource
	// MinCertValidity is the certificate validity required when the plan has
	// no min-certs-expiration-in-day annotation.
	MinCertValidity time.Duration
	// Deadlines bound every wait.
	Deadlines Deadlines
	// RetryWindow is how long a plan that failed for a reason a retry can
	// cure keeps what it made and changed, waiting for the retry
	// annotation, before it is cleaned up; 0 cleans it up at once.
	RetryWindow time.Duration
	// UpgradeLog: the manager captures the upgrade's logs (internal/
	// upgradelog), so the pods of a plan whose logs are kept are made
	// with its finalizer.
	UpgradeLog bool
}

// Deadlines bound waits that could otherwise last forever; each is measured
// from when the plan entered the waiting phase.
type Deadlines struct {
	// MissingObject: a Version, Setting or image the plan refers to does not
	// exist.
	MissingObject time.Duration
	// Kubelet: a node's kubelet cannot be read for the disk-space check.
	Kubelet time.Duration
	// Repo: the repo is not serving.
	Repo time.Duration
	// Metadata: the release metadata cannot be fetched from the repo.
	Metadata time.Duration
	// Reboot: a node does not come back with the new OS after its upgrade
	// (measured from when the node started waiting for it).
	Reboot time.Duration
	// Rancher: Rancher does not drain a node and upgrade its RKE2 after the
	// node's VMs left it (measured from when the node became PreDrained).
	Rancher time.Duration
	// Verify: a step reported success but the cluster does not show its
	// effect (measured from the success: the Job's completion, or the start
	// of the final verification).
	Verify time.Duration
	// NodeJob: a pre-drain, post-drain or single-node-upgrade Job runs
	// (evacuating a node's VMs, or writing the new OS), pod scheduling
	// included: the Jobs' active deadline.
	NodeJob time.Duration
	// HealthGate: the cluster is not healthy enough to drain the next node
	// (measured from when the gate first held that node).
	HealthGate time.Duration
	// MigrationProgress: a VM's live migration off a draining node has run
	// this long without completing (or waited this long for a target):
	// the plan names it as making no progress.
	MigrationProgress time.Duration
	// Migration: a VM's live migration has failed or made no progress this
	// long (KubeVirt trying again meanwhile); the node is then held for the
	// operator's choice, by an annotation on the VM: try again, or shut it
	// down now and start it after the node's upgrade. Measured from the
	// first trouble of the node's drain or the operator's last retry, the
	// time the plan was paused left out. The node fails at last when its
	// pre-drain Job's wait for the VMs runs out.
	Migration time.Duration
}

// DefaultConfig returns the production configuration without the parts that
// need a cluster connection (Kubelet) or a build (Version).
func DefaultConfig() Config {
	return Config{
		ToolkitRepository: v1beta1.DefaultUpgradeToolkitRepository,
		Version:           "dev",
		JobServiceAccount: "harvester",
		// Harvester's own service account, which is cluster-admin.
		ClusterUpgradeServiceAccount: "harvester",
		PlanServiceAccount:           "system-upgrade-controller",
		RepoURL: func(namespace, service string) string {
			return fmt.Sprintf("http://%s.%s.svc/harvester-iso/", service, namespace)
		},
		DialCerts:       preflight.DialCerts,
		MinCertValidity: v1beta1.DefaultMinCertsExpirationInDay * 24 * time.Hour,
		Deadlines: Deadlines{
			MissingObject: 5 * time.Minute,
			Kubelet:       3 * time.Minute,
			Repo:          15 * time.Minute,
			Metadata:      10 * time.Minute,
			Reboot:        45 * time.Minute,
			Rancher:       time.Hour,
			Verify:        10 * time.Minute,
			NodeJob:       2 * time.Hour,
			HealthGate:    30 * time.Minute,
			// KubeVirt's own progress timeout is 150 s: a migration that
			// has not completed in two minutes is worth naming.
			MigrationProgress: 2 * time.Minute,
			Migration:         15 * time.Minute,
		},
		RetryWindow: 24 * time.Hour,
	}
}

// Toolkit is the toolkit image of the plan's workloads: from the plan's
// annotation or the manager's repository, tagged with spec.upgrade, else
// with the running release (before the preload imported the new one) or
// the new release (after), each pulled from the mirror when one is set.
func (c *Config) Toolkit(p *v1beta1.UpgradePlan) images.Toolkit {
	t := images.Toolkit{Repository: c.ToolkitRepository, Fallback: c.Version, Mirror: c.ImageMirror}
	if r := p.UpgradeToolkitImage(); r != "" {
		t.Repository = r
	}
	if p.Spec.Upgrade != nil {
		t.Tag = *p.Spec.Upgrade
	}
	if v := p.Status.PreviousVersion; v != nil {
		t.Running = *v
	}
	if rm := p.Status.ReleaseMetadata; rm != nil {
		t.Target = rm.Harvester
	}
	return t
}
