package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/harvester/upgrade-toolkit/internal/release"
)

// Content reads the files of a release by their path in the repo: the
// upgrade repo (*release.Client) or the ISO itself (FS).
type Content interface {
	Get(ctx context.Context, repoPath string) ([]byte, error)
}

// FS reads a release's files from a file tree, e.g. an ISO opened with
// iso9660; a missing file is release.ErrNotFound, as from the repo.
type FS struct{ FS fs.FS }

// Get implements Content.
func (f FS) Get(_ context.Context, repoPath string) ([]byte, error) {
	data, err := fs.ReadFile(f.FS, repoPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", repoPath, release.ErrNotFound)
	}
	return data, err
}

// Release is what a release ISO says of images: its metadata, its image
// archives with the images each holds, and the image list of the release a
// cluster runs before upgrading to it.
type Release struct {
	Release  *release.Release
	Archives []Archive
	// Running is the image list of the running release; nil when the ISO
	// has none for it (non-GA ISOs keep no lists).
	Running []string
}

// Read reads harvester-release.yaml, bundle/metadata.yaml, the list of
// each archive and the running release's image list. A malformed file is
// an error matching release.ErrMalformed; a missing running list is not an
// error.
func Read(ctx context.Context, c Content, running string) (*Release, error) {
	get := func(p string) ([]byte, error) {
		data, err := c.Get(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		return data, nil
	}
	data, err := get(release.ReleaseFile)
	if err != nil {
		return nil, err
	}
	rel, err := release.ParseRelease(data)
	if err != nil {
		return nil, err
	}
	if data, err = get(release.BundleMetadataFile); err != nil {
		return nil, err
	}
	bundle, err := release.ParseBundleMetadata(data)
	if err != nil {
		return nil, err
	}
	out := &Release{Release: rel}
	groups := []struct {
		archives []release.ImageArchive
		imported bool
	}{{bundle.Images.Common, true}, {bundle.Images.RKE2, true}, {bundle.Images.Agent, false}}
	for _, g := range groups {
		for _, a := range g.archives {
			data, err := get(a.ListPath())
			if err != nil {
				return nil, err
			}
			list, err := release.ParseImageList(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.ListPath(), err)
			}
			out.Archives = append(out.Archives, Archive{Path: a.ArchivePath(), Imported: g.imported, Images: list})
		}
	}
	if running == "" {
		return out, nil
	}
	if _, err := release.ParseVersion(running); err != nil {
		return nil, fmt.Errorf("running release: %w", err)
	}
	data, err = c.Get(ctx, release.ImageListPath(running))
	switch {
	case errors.Is(err, release.ErrNotFound):
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", release.ImageListPath(running), err)
	}
	if out.Running, err = release.ParseImageList(data); err != nil {
		return nil, err
	}
	if out.Running == nil {
		out.Running = []string{}
	}
	return out, nil
}

// Images are every image of the release's archives, sorted, once each.
func (r *Release) Images() []string {
	var all []string
	for _, a := range r.Archives {
		all = append(all, a.Images...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}
