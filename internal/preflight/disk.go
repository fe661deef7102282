package preflight

import (
	"fmt"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// NewImagesSize is how much disk the new release's container images take
// once preloaded: all image archives of a release together.
const NewImagesSize uint64 = 13 << 30

// DefaultImageGCHighThresholdPercent is the kubelet's default image garbage
// collection threshold.
const DefaultImageGCHighThresholdPercent = 85

// NodeDisk is what a node's kubelet reports about the file system that holds
// container images.
type NodeDisk struct {
	Node string
	// Filesystem names the file system measured ("imagefs" or "nodefs").
	Filesystem    string
	CapacityBytes uint64
	UsedBytes     uint64
	// ImageGCHighThresholdPercent is the kubelet's threshold: above it the
	// kubelet starts deleting images, preloaded ones included.
	ImageGCHighThresholdPercent int
}

// DiskSpace checks that preloading the new images keeps every node below its
// kubelet's image garbage collection threshold: a verdict per node.
func DiskSpace(disks []NodeDisk, newImages uint64) []Verdict {
	var out []Verdict
	for _, d := range disks {
		if d.CapacityBytes == 0 {
			out = append(out, riskFound(RiskInsufficientDiskSpace, []string{"node/" + d.Node}, "node %q: the kubelet reports no %s capacity", d.Node, d.Filesystem))
			continue
		}
		projected := float64(d.UsedBytes+newImages) / float64(d.CapacityBytes) * 100
		if projected <= float64(d.ImageGCHighThresholdPercent) {
			out = append(out, Passed(RiskInsufficientDiskSpace, "node %q will reach %.2f%% of its %s, within the kubelet image garbage collection threshold of %d%%",
				d.Node, projected, d.Filesystem, d.ImageGCHighThresholdPercent))
			continue
		}
		out = append(out, riskFound(RiskInsufficientDiskSpace, []string{"node/" + d.Node},
			"node %q will reach %.2f%% of its %s (%s used of %s, plus %s of new images), above the kubelet image garbage collection threshold of %d%%: free at least %s on the node, or set the annotation %s: \"true\" to skip this check",
			d.Node, projected, d.Filesystem, gib(d.UsedBytes), gib(d.CapacityBytes), gib(newImages), d.ImageGCHighThresholdPercent,
			gib(d.UsedBytes+newImages-uint64(float64(d.CapacityBytes)*float64(d.ImageGCHighThresholdPercent)/100)), v1beta1.AnnotationSkipGCThresholdCheck))
	}
	return out
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
