package images

import (
	"fmt"
	"slices"
)

// Facts are what decides where a workload's image comes from.
type Facts struct {
	Toolkit Toolkit
	// RunningImages is the running release's image list (every node has
	// it), normalized; nil when it is not known.
	RunningImages []string
	// Archives are the new release's archives, with their images; nil when
	// not known. ImagePreload imports the Imported ones on every node.
	Archives []Archive
	// PreloadSkipped: spec.imagePreloadOption.concurrency is negative, so
	// ImagePreload imports nothing.
	PreloadSkipped bool
	// Registries is Harvester's containerd-registry setting.
	Registries Registries
}

// Archive is an image archive of the release and the images it holds.
type Archive struct {
	// Path is the archive's path in the repo (bundle/...).
	Path string `json:"path"`
	// Imported: ImagePreload imports it into containerd on every node (the
	// bundle's common and RKE2 archives); otherwise it is only copied to
	// disk (the agent archives, for rancher-system-agent).
	Imported bool     `json:"imported"`
	Images   []string `json:"images"`
}

// Origin is where a node gets a workload's image.
type Origin string

const (
	// FromRunningRelease: every node has it, since the running release
	// installed it.
	FromRunningRelease Origin = "running-release"
	// FromPreload: ImagePreload imports it on every node, from the new
	// release's archives.
	FromPreload Origin = "preload"
	// FromMirror: pulled from the toolkit's mirror.
	FromMirror Origin = "mirror"
	// FromRegistry: pulled through Harvester's containerd-registry setting.
	FromRegistry Origin = "registry"
	// Unknown: not known (an image list is missing or was not read, or the
	// nodes must pull it from its registry, which they may or may not
	// reach).
	Unknown Origin = "unknown"
	// Missing: no node has it and nothing pulls it.
	Missing Origin = "missing"
)

// Entry is a workload, the image it runs and where its node gets it.
type Entry struct {
	Workload
	// Image is the reference the workload runs.
	Image string `json:"image"`
	// Source is the image as the releases name it: what a node must have,
	// or a mirror hold.
	Source string `json:"source"`
	Origin Origin `json:"origin"`
	// Detail names the list, archive, mirror or registry setting.
	Detail string `json:"detail"`
}

// Resolve says, for each workload, the image it runs and where its node
// gets it.
func Resolve(f Facts, workloads []Workload) []Entry {
	out := make([]Entry, 0, len(workloads))
	for _, w := range workloads {
		src := f.Toolkit.Source(w.Stage)
		e := Entry{Workload: w, Image: f.Toolkit.Image(w.Stage), Source: src}
		e.Origin, e.Detail = f.origin(src, w.Stage)
		out = append(out, e)
	}
	return out
}

// origin is where a node of a stage gets src.
func (f Facts) origin(src string, stage Stage) (Origin, string) {
	if !f.Toolkit.Mirror.IsZero() {
		return FromMirror, "pulled from the mirror " + f.Toolkit.Mirror.String()
	}
	running := f.Toolkit.Running
	if f.RunningImages != nil && slices.Contains(f.RunningImages, src) {
		return FromRunningRelease, fmt.Sprintf("on every node: %s installed it (its image list)", running)
	}
	if stage == AfterImport && !f.PreloadSkipped {
		for _, a := range f.Archives {
			if a.Imported && slices.Contains(a.Images, src) {
				return FromPreload, "imported on every node by ImagePreload from " + a.Path
			}
		}
	}
	if how, ok := f.Registries.Pulls(src); ok {
		return FromRegistry, "pulled " + how
	}
	switch {
	case f.RunningImages == nil:
		return Unknown, fmt.Sprintf("unknown: the image list of the running release %s was not read", orUnknown(running))
	case stage == AfterImport && f.PreloadSkipped:
		// Skipping the preload is Harvester's choice for clusters that
		// reach their registries (harvester#6028): judged, not refused.
		return Unknown, fmt.Sprintf("%s's image list does not name it and ImagePreload imports nothing (spec.imagePreloadOption.concurrency is negative): each node must pull it from its registry, which an air-gapped cluster cannot", running)
	case stage == AfterImport && f.Archives == nil:
		return Unknown, "unknown: the new release's archives were not read"
	case stage == AfterImport:
		return Missing, fmt.Sprintf("not on the nodes: neither %s's image list nor the archives ImagePreload imports from %s name it", running, orUnknown(f.Toolkit.Target))
	}
	return Missing, fmt.Sprintf("not on the nodes: the running release %s's image list does not name it", running)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// Sources are the distinct images the entries need, in order, with the
// workloads that run each.
func Sources(entries []Entry) (sources []string, users map[string][]Entry) {
	users = map[string][]Entry{}
	for _, e := range entries {
		if _, ok := users[e.Source]; !ok {
			sources = append(sources, e.Source)
		}
		users[e.Source] = append(users[e.Source], e)
	}
	return sources, users
}
