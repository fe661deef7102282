package images

// Report is every image an upgrade uses and where each comes from, as the
// `images` command prints it.
type Report struct {
	// Running is the release the cluster runs; Target the one it upgrades
	// to.
	Running string `json:"running"`
	Target  string `json:"target"`
	// Mirror is the toolkit's mirror, if any.
	Mirror         string `json:"mirror,omitempty"`
	PreloadSkipped bool   `json:"preloadSkipped,omitempty"`
	// Workloads are the toolkit's workloads, each with its image and where
	// its node gets it.
	Workloads []Entry `json:"workloads"`
	// Release are the new release's archives: ImagePreload imports the
	// imported ones on every node, and the components the upgrade installs
	// run their images.
	Release []Archive `json:"release"`
	// Push is what a mirror must hold for this upgrade.
	Push []Copy `json:"push"`
}

// Copy is an image a mirror must hold.
type Copy struct {
	// Image is the image as it is published.
	Image string `json:"image"`
	// Mirror is the copy the upgrade pulls, when a mirror is set.
	Mirror string `json:"mirror,omitempty"`
	// For says who needs it.
	For string `json:"for"`
}

// NewReport reports the images of an upgrade to r under the facts f
// (f.RunningImages and f.Archives are taken from r).
func NewReport(f Facts, r *Release) Report {
	f.RunningImages, f.Archives = r.Running, r.Archives
	rep := Report{
		Running: f.Toolkit.Running, Target: f.Toolkit.Target, PreloadSkipped: f.PreloadSkipped,
		Workloads: Resolve(f, Workloads), Release: r.Archives,
	}
	if !f.Toolkit.Mirror.IsZero() {
		rep.Mirror = f.Toolkit.Mirror.String()
	}
	sources, users := Sources(rep.Workloads)
	for _, src := range sources {
		var names []string
		for _, e := range users[src] {
			names = append(names, e.Name)
		}
		c := Copy{Image: src, For: "the toolkit's " + joinNames(names)}
		if !f.Toolkit.Mirror.IsZero() {
			c.Mirror = f.Toolkit.Mirror.Rewrite(src)
		}
		rep.Push = append(rep.Push, c)
	}
	if f.PreloadSkipped {
		for _, img := range r.Images() {
			rep.Push = append(rep.Push, Copy{Image: img, For: "the new release's components: ImagePreload is skipped, so the nodes pull them"})
		}
	}
	return rep
}

func joinNames(names []string) string {
	out := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			out += " and "
		default:
			out += ", "
		}
		out += n
	}
	return out
}
