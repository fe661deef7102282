package release

import (
	"bufio"
	"bytes"
	"path"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// ImageListDir holds one image list per Harvester version the release can
// be upgraded from, plus CurrentImageList for the release itself.
const ImageListDir = "bundle/harvester/images-lists-archive"

// CurrentImageList is the "version" of the release's own image list.
const CurrentImageList = "current"

// ImageListPath is the path in the repo of the list of every image of a
// Harvester version (see ParseVersion), or of the release itself for
// CurrentImageList.
func ImageListPath(version string) string {
	return ImageListDir + "/" + version + "/image_list_all.txt"
}

// RetainedImageNames are the images ImageCleanup never removes, by the last
// component of their name (tag, digest, registry and namespace do not
// matter), because something may still run them after the upgrade: the
// upgrade image, the Longhorn engine and instance manager of volumes whose
// engine has not been upgraded yet, and the fluentd and fluent-bit images of
// the logging stack. The toolkit's own image is kept too: its repo runs the
// running release's, and a node is cleaned as soon as it is upgraded, while
// the repo still moves onto it as the other nodes drain.
var RetainedImageNames = []string{
	"harvester-upgrade",
	"harvester-upgrade-toolkit",
	"longhorn-engine",
	"longhorn-instance-manager",
	"mirrored-banzaicloud-fluentd",
	"mirrored-fluent-fluent-bit",
}

// ParseImageList parses an image list: one image reference per line; blank
// lines, surrounding whitespace and comments (from "#" to the end of the
// line) are ignored. Each reference is normalized to its full form
// ("rancher/harvester:v1.8.0" becomes "docker.io/rancher/harvester:v1.8.0",
// an untagged image gets ":latest"), which is also the form containerd
// stores, so that lists written either way compare equal. The result is
// sorted and has no duplicates. A line that is not an image reference is an
// error naming its number.
func ParseImageList(data []byte) ([]string, error) {
	var p problems
	var images []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		ref, err := normalizeImage(line)
		if err != nil {
			p.addf("line %d: %q is not an image reference (%v)", n, line, err)
			continue
		}
		images = append(images, ref)
	}
	if err := sc.Err(); err != nil {
		p.addf("line %d: %v", n+1, err)
	}
	if err := p.err("image_list_all.txt"); err != nil {
		return nil, err
	}
	slices.Sort(images)
	return slices.Compact(images), nil
}

func normalizeImage(s string) (string, error) {
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return "", err
	}
	return reference.TagNameOnly(named).String(), nil
}

// imageName is the last component of an image's name:
// "registry:5000/rancher/harvester-upgrade:v1.8.0" gives "harvester-upgrade".
func imageName(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ""
	}
	return path.Base(reference.Path(named))
}

// StaleImages returns the images of the previous release that the current
// one no longer uses, sorted, without those whose name is in retain
// (normally RetainedImageNames). previous and current are lists from
// ParseImageList.
func StaleImages(previous, current, retain []string) []string {
	inCurrent := make(map[string]bool, len(current))
	for _, ref := range current {
		inCurrent[ref] = true
	}
	var stale []string
	for _, ref := range previous {
		if !inCurrent[ref] && !slices.Contains(retain, imageName(ref)) {
			stale = append(stale, ref)
		}
	}
	slices.Sort(stale)
	return slices.Compact(stale)
}
