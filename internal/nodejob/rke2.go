package nodejob

import (
	"context"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// RKE2 configuration on the host.
const (
	// RKE2ConfigDir holds RKE2's configuration drop-ins.
	RKE2ConfigDir = "/etc/rancher/rke2/config.yaml.d"
	// CanalConfigManifest is the canal configuration of older releases,
	// which the new release's chart replaces.
	CanalConfigManifest = "/var/lib/rancher/rke2/server/manifests/rke2-canal-config.yaml"
	// MaxPods is the kubelet's pod limit on Harvester nodes.
	MaxPods = 200
	// CleanupKubeletStage is an OEM cloud-init stage that removes the CPU
	// manager's state at boot: the state file is part of the installed
	// image and would otherwise come back with policy "none" after every
	// reboot, which stops a kubelet configured with the static policy.
	CleanupKubeletStage = "/oem/91_cleanup_kubelet.yaml"
)

// ReservedCPU is the CPU, in millicores, the kubelet keeps for the system
// and for Kubernetes on a node with the given cores and pod limit, by GKE's
// formula (which Harvester uses): 6% of the first core, 1% of the second,
// 0.5% of the third and fourth, 0.25% of each further core, plus 400m when
// the pod limit exceeds the default of 110. Harvester reserves twice that
// and splits it 2:3 between the system and Kubernetes, which it returns.
func ReservedCPU(cores, maxPods int) (system, kube int) {
	if cores <= 0 || maxPods <= 0 {
		return 0, 0
	}
	reserved := 60
	if cores > 1 {
		reserved += 10
	}
	if cores > 2 {
		reserved += 10
	}
	if cores > 4 {
		reserved += (cores - 4) * 250 / 100
	}
	if maxPods > 110 {
		reserved += 400
	}
	return reserved * 2 * 2 / 5, reserved * 2 * 3 / 5
}

// TraefikConfig makes RKE2 run Traefik as its ingress controller.
const TraefikConfig = RKE2ConfigDir + "/99-traefik.yaml"

// Per-version steps of the node jobs.
const stepSwitchIngress = "switch-ingress"

// VersionSteps are the per-version steps of Harvester's upgrade_node.sh, as
// data.
var VersionSteps = release.VersionSteps{
	{Step: stepSwitchIngress, To: "v1.9",
		Why: "v1.9 moves RKE2's ingress controller from ingress-nginx to Traefik"},
}

// switchIngress has RKE2 run Traefik as its ingress controller from its
// next start, on upgrades to a release that needs it, unless the node has
// that configuration (the operator's or an earlier attempt's).
func (j *Job) switchIngress(ctx context.Context, s *state) error {
	if s.plan == nil {
		if err := j.readPlan(ctx, s); err != nil {
			return err
		}
	}
	previous, target := "", ""
	if p := s.plan.Status.PreviousVersion; p != nil {
		previous = *p
	}
	if rm := s.plan.Status.ReleaseMetadata; rm != nil {
		target = rm.Harvester
	}
	if ok, why := VersionSteps.AppliesTo(stepSwitchIngress, previous, target); !ok {
		log.FromContext(ctx).Info("RKE2's ingress controller stays", "reason", why)
		return nil
	}
	if ok, err := j.Host.FileExists(ctx, TraefikConfig); err != nil || ok {
		return err
	}
	return j.Host.WriteFile(ctx, TraefikConfig, strings.NewReader("ingress-controller: traefik\n"), 0o644)
}

// removeCanalConfig removes the canal configuration of older releases.
func (j *Job) removeCanalConfig(ctx context.Context, _ *state) error {
	return j.Host.Remove(ctx, CanalConfigManifest)
}

// disableRKE2Charts keeps RKE2 from deploying the snapshot controller
// charts, which Harvester deploys itself.
func (j *Job) disableRKE2Charts(ctx context.Context, _ *state) error {
	content := "disable:\n- rke2-snapshot-controller\n- rke2-snapshot-controller-crd\n- rke2-snapshot-validation-webhook\n"
	return j.Host.WriteFile(ctx, RKE2ConfigDir+"/40-disable-charts.yaml", strings.NewReader(content), 0o644)
}

// configureKubelet writes the kubelet settings of the new release: the pod
// limit always; CPU reservations and CDI's device permissions unless the
// node has them (an operator may have tuned them); the CPU manager cleanup
// at boot.
func (j *Job) configureKubelet(ctx context.Context, _ *state) error {
	cores, err := j.Host.CPUCount(ctx)
	if err != nil {
		return err
	}
	system, kube := ReservedCPU(cores, MaxPods)
	files := []struct {
		path, content string
		keep          bool
	}{
		{RKE2ConfigDir + "/99-max-pods.yaml", fmt.Sprintf("kubelet-arg:\n- \"max-pods=%d\"\n", MaxPods), false},
		{RKE2ConfigDir + "/99-z00-harvester-reserved-resources.yaml",
			fmt.Sprintf("kubelet-arg+:\n- \"system-reserved=cpu=%dm\"\n- \"kube-reserved=cpu=%dm\"\n", system, kube), true},
		// Longhorn's block devices are owned by root; CDI imports as non-root.
		{RKE2ConfigDir + "/91-harvester-cdi.yaml", "\"nonroot-devices\": true\n", true},
		{CleanupKubeletStage, "name: Cleanup Kubelet\nstages:\n  initramfs:\n    - commands:\n        - rm -f /var/lib/kubelet/cpu_manager_state\n", false},
	}
	for _, f := range files {
		if f.keep {
			if ok, err := j.Host.FileExists(ctx, f.path); err != nil || ok {
				if err != nil {
					return err
				}
				continue
			}
		}
		if err := j.Host.WriteFile(ctx, f.path, strings.NewReader(f.content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cleanRKE2Archives removes the RKE2 archives staged for the upgrade once
// RKE2 runs the new version: they are large and no longer needed.
func (j *Job) cleanRKE2Archives(ctx context.Context, s *state) error {
	for _, a := range s.bundle.Images.RKE2 {
		for _, f := range []string{a.List, a.Archive} {
			if err := j.Host.Remove(ctx, RKE2ImagesDir+"/"+path.Base(f)); err != nil {
				return err
			}
		}
	}
	return nil
}

// RootfsPath is where the new OS image is downloaded to on the host.
const RootfsPath = "/usr/local/upgrade_tmp/" + release.RootfsFile

// downloadRootfs downloads the new OS image unless it is there.
func (j *Job) downloadRootfs(ctx context.Context, s *state) error {
	if up, err := j.osUpToDate(ctx, s); err != nil || up {
		return err
	}
	return j.download(ctx, s, release.RootfsFile, RootfsPath)
}

// osUpToDate reports whether the node runs the release's OS already.
func (j *Job) osUpToDate(ctx context.Context, s *state) (bool, error) {
	running, err := j.Host.OSPrettyName(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the node's OS name: %w", err)
	}
	return running == s.release.OS, nil
}

// upgradeOS installs the release's OS and reboots the node into it once the
// job has completed; a node that runs it already is left alone.
func (j *Job) upgradeOS(ctx context.Context, s *state) error {
	if up, err := j.osUpToDate(ctx, s); err != nil || up {
		return err
	}
	if j.Pod == "" {
		return fmt.Errorf("%s is not set: the node could not be rebooted after the job, because the job does not know its pod", jobspec.EnvPod)
	}
	if err := j.downloadRootfs(ctx, s); err != nil {
		return err
	}
	if err := j.Host.UpgradeOS(ctx, RootfsPath); err != nil {
		return err
	}
	return j.Host.RebootAfterJob(ctx, j.jobContainer())
}
