// Package images is the model of the container images an upgrade runs: which
// image each workload of the toolkit runs, which images each node has at
// each point of the upgrade, and so where each workload's image comes from.
// docs/images.md writes the model down; the phases pick their workloads'
// images here, the pre-flight judges them with Resolve, and the `images`
// command reports them.
//
// What a node has:
//
//   - before the upgrade, the running release's images: Harvester imports
//     every image of its release (the release's image_list_all.txt, which
//     the new ISO keeps under bundle/harvester/images-lists-archive/<version>)
//     on every node when it is installed or upgraded;
//   - once ImagePreload ran on it, also the new release's images of the
//     bundle's common and RKE2 archives (the agent archives are only copied
//     to disk for rancher-system-agent);
//   - once the image cleanup ran on it (as soon as it is upgraded), no
//     longer the running release's images the new one does not use
//     (release.StaleImages);
//   - the manager's own image, on the nodes its pods ran on only: no
//     workload uses it, since no other node is sure to have it.
//
// So the workloads that run before a node's import (the repo, the image
// preload) run the running release's toolkit image, as Harvester's own
// upgrade runs the running release's upgrade image for its repo and
// preload; the workloads after it (the cluster upgrade, the node jobs,
// restore-vm, the image cleanup) run the new release's. An image that is
// not there must be pulled: from the toolkit's mirror (Mirror), or through
// Harvester's containerd-registry setting (Registries).
package images

import (
	"fmt"

	"github.com/distribution/reference"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
)

// Stage is when a workload runs on its node, against the import of the new
// release's images there.
type Stage string

const (
	// BeforeImport: the node has the running release's images only.
	BeforeImport Stage = "before-import"
	// AfterImport: the preload imported the new release's images on every
	// node.
	AfterImport Stage = "after-import"
)

// Workload is one kind of pod the upgrade runs.
type Workload struct {
	// Phase is the pipeline step that runs it.
	Phase string `json:"phase"`
	// Name is its component or job type.
	Name string `json:"name"`
	// Where it runs.
	Where string `json:"where"`
	// Stage is when it runs against the import.
	Stage Stage `json:"stage"`
}

// Workloads are every kind of pod the toolkit makes, in the order the
// upgrade runs them.
var Workloads = []Workload{
	{v1beta1.StepRepoCreate, v1beta1.ComponentRepo, "one or two non-witness nodes, moved by drains", BeforeImport},
	{v1beta1.StepImagePreload, v1beta1.ComponentImagePreload, "every managed node, before its import", BeforeImport},
	{v1beta1.StepClusterUpgrade, v1beta1.ComponentClusterUpgrade, "any node", AfterImport},
	{v1beta1.StepNodeUpgrade, jobspec.PreDrain, "each node", AfterImport},
	{v1beta1.StepNodeUpgrade, jobspec.PostDrain, "each node", AfterImport},
	{v1beta1.StepNodeUpgrade, jobspec.SingleNodeUpgrade, "the only node", AfterImport},
	{v1beta1.StepNodeUpgrade, jobspec.RestoreVM, "any node", AfterImport},
	{v1beta1.StepImageCleanup, v1beta1.ComponentImageCleanup, "each managed node, once it is upgraded", AfterImport},
}

// Toolkit says which toolkit image the workloads of one upgrade run.
type Toolkit struct {
	// Repository of the toolkit image (the plan's upgrade-toolkit-image
	// annotation, else the manager's --toolkit-image-repository).
	Repository string
	// Tag, when set (spec.upgrade), is every workload's tag.
	Tag string
	// Running is the release the cluster runs; Target the one it upgrades
	// to. Fallback is the tag when either is unknown (the manager's own
	// version).
	Running, Target, Fallback string
	// Mirror, when set, is where every workload's image is pulled from.
	Mirror Mirror
}

// Source is the toolkit image a workload of a stage needs on its node, as
// the releases name it, before any mirror rewrite.
func (t Toolkit) Source(stage Stage) string {
	tag := t.Tag
	if tag == "" {
		tag = t.Running
		if stage == AfterImport {
			tag = t.Target
		}
	}
	if tag == "" {
		tag = t.Fallback
	}
	return Normalize(t.Repository + ":" + tag)
}

// Image is the image a workload of a stage runs: Source, rewritten to the
// mirror when one is set.
func (t Toolkit) Image(stage Stage) string { return t.Mirror.Rewrite(t.Source(stage)) }

// Split cuts an image reference into its repository and its tag (or
// digest, with its "@"), as system-upgrade-controller's Plan takes them.
func Split(ref string) (repository, tag string) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref, ""
	}
	repository = named.Name()
	switch r := named.(type) {
	case reference.Digested:
		tag = "@" + r.Digest().String()
	case reference.Tagged:
		tag = r.Tag()
	}
	return repository, tag
}

// Normalize writes an image reference in its full form
// (docker.io/rancher/x:v1), as image lists and containerd have them; a
// reference that does not parse is returned as is.
func Normalize(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// registryOf is the registry host of an image reference: docker.io for
// rancher/x.
func registryOf(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("%q is not an image reference: %w", ref, err)
	}
	return reference.Domain(named), nil
}
