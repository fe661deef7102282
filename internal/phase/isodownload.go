package phase

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// ISODownload has Harvester and CDI download the release ISO into a
// VirtualMachineImage, or adopts the user's image named by spec.image, and
// waits until it is imported.
type ISODownload struct{}

// Name implements Phase.
func (ISODownload) Name() string { return v1beta1.StepISODownload }

// Run implements Phase.
func (ISODownload) Run(ctx context.Context, s *Scope) (Result, error) {
	p := s.Plan
	name := ptr.Deref(p.Spec.Image, names.ISOImage(p.Name))
	p.Status.ISOImageID = &name

	img := &harvesterv1beta1.VirtualMachineImage{}
	found, err := s.get(ctx, cluster.HarvesterNamespace, name, img)
	if err != nil {
		return Result{}, err
	}
	switch {
	case found:
	case p.Spec.Image != nil:
		return s.boundedWait(s.Config.Deadlines.MissingObject,
			fmt.Sprintf("waiting for VirtualMachineImage %s/%s (spec.image) to exist", cluster.HarvesterNamespace, name),
			fmt.Sprintf("VirtualMachineImage %s/%s named by spec.image does not exist: upload or download the ISO, then retry the plan", cluster.HarvesterNamespace, name)), nil
	case p.Status.Version == nil:
		return FailFinal("the plan has neither spec.image nor a Version snapshot: this is a bug"), nil
	default:
		img = cluster.NewISOImage(cluster.HarvesterNamespace, name,
			p.Name+"-"+ptr.Deref(p.Spec.Version, ""), p.Status.Version.ISOURL, p.Status.Version.ISOChecksum)
		if err := s.create(ctx, img, v1beta1.ComponentISO); err != nil {
			return Result{}, err
		}
		return Wait("downloading the release ISO into VirtualMachineImage %s/%s", img.Namespace, name), nil
	}

	state, msg := cluster.ImageImport(img)
	switch state {
	case cluster.Imported:
		return Done(), nil
	case cluster.ImportFailed:
		return Fail("the release ISO could not be imported into VirtualMachineImage %s/%s: %s; check the ISO URL and the network, then retry the plan",
			img.Namespace, img.Name, msg), nil
	}
	wait := fmt.Sprintf("importing the release ISO into VirtualMachineImage %s/%s: %d%%", img.Namespace, img.Name, img.Status.Progress)
	if msg != "" {
		wait += " (" + msg + ")"
	}
	return Wait("%s", wait), nil
}
