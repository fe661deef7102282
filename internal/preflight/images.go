package preflight

import (
	"fmt"
	"slices"
	"strings"

	"github.com/harvester/upgrade-toolkit/internal/images"
)

// ReasonImagesAvailable: every image the upgrade runs is on the node that
// runs it when it runs, or a registry the nodes reach holds it.
const ReasonImagesAvailable Reason = "ImagesAvailable"

// Images judges where the nodes get the images of an upgrade (the model of
// internal/images): one verdict per image the toolkit's workloads run,
// failed when no node has it and nothing pulls it, a warning when that is
// not known; with the preload skipped, one more for the new release's own
// images, which the nodes must then pull; and a warning for a mirror that
// Harvester's containerd-registry setting does not name. releaseImages are
// every image of the new release (nil when not known).
func Images(f images.Facts, releaseImages []string) []Verdict {
	entries := images.Resolve(f, images.Workloads)
	fix := fmt.Sprintf("copy it to a registry the nodes reach (upgrade-toolkit images --version %s --push-list lists what to copy) and set the manager's --image-mirror (chart value imageMirror), "+
		"or give Harvester's containerd-registry setting a mirror of its registry", f.Toolkit.Target)
	var out []Verdict
	type key struct {
		source string
		origin images.Origin
	}
	var order []key
	users := map[key][]string{}
	detail := map[key]string{}
	for _, e := range entries {
		k := key{e.Source, e.Origin}
		if _, ok := users[k]; !ok {
			order = append(order, k)
		}
		if !slices.Contains(users[k], e.Name) {
			users[k] = append(users[k], e.Name)
		}
		detail[k] = e.Detail
	}
	for _, k := range order {
		who := strings.Join(users[k], ", ")
		switch k.origin {
		case images.Missing:
			out = append(out, Failed(ReasonImagesAvailable, "image %s (%s) is %s, and nothing pulls it: the cluster has no mirror for it; %s", k.source, who, detail[k], fix))
		case images.Unknown:
			out = append(out, Warning(ReasonImagesAvailable, "image %s (%s): %s, so whether every node has it is not known; a node without it shows its pod waiting in ImagePullBackOff, and the plan says so", k.source, who, detail[k]))
		default:
			out = append(out, Passed(ReasonImagesAvailable, "image %s (%s): %s", k.source, who, detail[k]))
		}
	}
	if f.PreloadSkipped && releaseImages != nil {
		out = append(out, releasePulls(f, releaseImages))
	}
	if m := f.Toolkit.Mirror; !m.IsZero() && !f.Registries.Knows(m.Host()) {
		out = append(out, Warning(ReasonImagesAvailable, "the image mirror %s is not named in Harvester's containerd-registry setting: the nodes reach it over HTTPS with the system's certificate authorities and no credentials; "+
			"if it needs credentials or its own certificate authority, add it under Configs of containerd-registry", m))
	}
	return out
}

// releasePulls judges the new release's images when ImagePreload imports
// none of them: the nodes pull them, through containerd-registry or from
// their registries directly (the toolkit's mirror rewrites only its own
// workloads' images). Skipping the preload is Harvester's choice for
// clusters that reach their registries, so a registry containerd-registry
// does not mirror is a warning, not a refusal.
func releasePulls(f images.Facts, releaseImages []string) Verdict {
	var unpulled []string
	for _, img := range releaseImages {
		if _, ok := f.Registries.Pulls(img); !ok {
			unpulled = append(unpulled, img)
		}
	}
	if len(unpulled) == 0 {
		return Passed(ReasonImagesAvailable, "ImagePreload is skipped: the nodes pull the new release's %d images through containerd-registry", len(releaseImages))
	}
	return Warning(ReasonImagesAvailable, "ImagePreload is skipped (spec.imagePreloadOption.concurrency is negative), so the nodes pull the new release's images from their registries, and Harvester's containerd-registry setting has no mirror for %d of them (%s%s): "+
		"an air-gapped cluster cannot pull them: give containerd-registry a mirror of their registries, or let ImagePreload import them (spec.imagePreloadOption.concurrency 0 or more)",
		len(unpulled), strings.Join(unpulled[:min(3, len(unpulled))], ", "), more(len(unpulled)-3))
}

func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more", n)
}
