package nodejob

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// Host paths of the node jobs.
const (
	// RKE2ImagesDir and AgentImagesDir are where RKE2 and
	// rancher-system-agent load image archives from when they start.
	RKE2ImagesDir  = "/var/lib/rancher/rke2/agent/images"
	AgentImagesDir = "/var/lib/rancher/agent/images"
	// AgentDropInDir holds the systemd drop-in that keeps
	// rancher-system-agent from restarting RKE2 while Rancher is upgraded
	// (rancher/rancher#41965).
	AgentDropInDir = "/run/systemd/system/rancher-system-agent.service.d"
	// AgentService is rancher-system-agent's unit.
	AgentService = "rancher-system-agent.service"
)

// checkEligibility refuses an upgrade the toolkit does not support or the
// version rules forbid (unless the plan says spec.force), with the same
// decision as the manager.
func (j *Job) checkEligibility(ctx context.Context, s *state) error {
	if err := j.readPlan(ctx, s); err != nil {
		return err
	}
	if s.plan.Forced() {
		log.FromContext(ctx).Info("spec.force is set: only the supported upgrade paths are checked")
	}
	return helper.PlanEligibility(s.plan)
}

// importImages imports the release's common and RKE2 image archives into
// containerd, skipping an archive whose images are all there already, and
// all of them when the plan skips the preload.
func (j *Job) importImages(ctx context.Context, s *state) error {
	logger := log.FromContext(ctx)
	if s.plan != nil && s.plan.PreloadConcurrency() < 0 {
		// The operator skipped the preload: the nodes pull the images when
		// they are upgraded. The steps after this one still run.
		logger.Info("image import skipped: spec.imagePreloadOption.concurrency is negative")
		return nil
	}
	have, err := j.presentImages(ctx)
	if err != nil {
		return err
	}
	for _, a := range slices.Concat(s.bundle.Images.Common, s.bundle.Images.RKE2) {
		data, err := s.repo.Get(ctx, a.ListPath())
		if err != nil {
			return fmt.Errorf("reading the image list %s: %w", a.ListPath(), err)
		}
		list, err := release.ParseImageList(data)
		if err != nil {
			return fmt.Errorf("image list %s: %w", a.ListPath(), err)
		}
		missing := slices.DeleteFunc(list, func(ref string) bool { return have[ref] })
		if len(missing) == 0 {
			logger.Info("images already present, not importing", "archive", a.ArchivePath())
			continue
		}
		logger.Info("importing images", "archive", a.ArchivePath(), "missing", len(missing), "example", missing[0])
		body, err := s.repo.Open(ctx, a.ArchivePath())
		if err != nil {
			return fmt.Errorf("downloading %s: %w", a.ArchivePath(), err)
		}
		err = j.Host.ImportImages(ctx, path.Base(a.Archive), body)
		_ = body.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// presentImages returns the images containerd has, in the normalized form
// of image lists.
func (j *Job) presentImages(ctx context.Context) (map[string]bool, error) {
	present, err := j.Host.Images(ctx)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, ref := range present {
		if norm, err := release.ParseImageList([]byte(ref)); err == nil && len(norm) == 1 {
			have[norm[0]] = true
		}
	}
	return have, nil
}

// stageArchives puts the RKE2 archives where RKE2 loads images from when it
// restarts on the new version, and the agent archives where
// rancher-system-agent does; files already there are kept.
func (j *Job) stageArchives(ctx context.Context, s *state) error {
	for _, g := range []struct {
		dir      string
		archives []release.ImageArchive
	}{{RKE2ImagesDir, s.bundle.Images.RKE2}, {AgentImagesDir, s.bundle.Images.Agent}} {
		for _, a := range g.archives {
			for _, file := range []string{a.ListPath(), a.ArchivePath()} {
				if err := j.download(ctx, s, file, g.dir+"/"+path.Base(file)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// download copies a file of the repo to the host unless it is there.
func (j *Job) download(ctx context.Context, s *state, repoPath, hostPath string) error {
	if ok, err := j.Host.FileExists(ctx, hostPath); err != nil || ok {
		return err
	}
	body, err := s.repo.Open(ctx, repoPath)
	if err != nil {
		return fmt.Errorf("downloading %s: %w", repoPath, err)
	}
	defer func() { _ = body.Close() }()
	if err := j.Host.WriteFile(ctx, hostPath, body, 0o644); err != nil {
		return fmt.Errorf("writing %s to %s on the node: %w", repoPath, hostPath, err)
	}
	return nil
}

// holdRKE2Restart tells rancher-system-agent, through a systemd drop-in
// under /run, not to restart RKE2 when the new Rancher hands it a new plan:
// otherwise every node restarts RKE2 at once during the cluster upgrade.
// The node's pre-drain (or single-node) job takes it away again.
func (j *Job) holdRKE2Restart(ctx context.Context, _ *state) error {
	envFile := AgentDropInDir + "/10-harvester-upgrade.env"
	files := []struct{ path, content string }{
		{envFile, "INSTALL_RKE2_SKIP_ENABLE=true\n"},
		{AgentDropInDir + "/override.conf", "[Service]\nEnvironmentFile=-" + envFile + "\n"},
	}
	for _, f := range files {
		if err := j.Host.WriteFile(ctx, f.path, strings.NewReader(f.content), 0o644); err != nil {
			return err
		}
	}
	return j.Host.RestartService(ctx, AgentService)
}

// releaseHold takes the drop-in of holdRKE2Restart away and restarts the
// agent so that it runs without it. It restarts the agent even when the
// drop-in is gone already: an earlier attempt may have removed it and died
// before the restart.
func (j *Job) releaseHold(ctx context.Context, _ *state) error {
	if err := j.Host.Remove(ctx, AgentDropInDir); err != nil {
		return err
	}
	return j.Host.RestartService(ctx, AgentService)
}
