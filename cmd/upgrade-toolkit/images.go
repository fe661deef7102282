package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/repo/iso9660"
)

func init() { subcommands = append(subcommands, newImagesCommand) }

// imagesOptions are the images command's flags.
type imagesOptions struct {
	version, iso, repoURL, from, upgrade, repository string
	mirror                                           images.Mirror
	skipPreload, pushList                            bool
	// printer prints the report as data; nil for the text view.
	printer printers.ResourcePrinter
}

func newImagesCommand() *cobra.Command {
	o := imagesOptions{repository: v1beta1.DefaultUpgradeToolkitRepository}
	cmd := &cobra.Command{
		Use:   "images (--version VERSION | --iso FILE|URL | --repo-url URL) [--from RUNNING] [--image-mirror REGISTRY] [-o text|json|yaml|...] [--push-list]",
		Short: "List every image an upgrade runs, where each node gets it, and what a mirror must hold",
		Long: `images reports the container images of an upgrade to a release: for each
workload of the toolkit (the repo, the image preload, the cluster upgrade,
the node jobs, restore-vm, the image cleanup) the image it runs and where
its node gets it:

  running-release  every node has it: the running release installed it (its
                   image list, kept in the new ISO's images-lists-archive)
  preload          ImagePreload imports it on every node from the new
                   release's archives before the workload runs
  mirror           pulled from --image-mirror
  registry         pulled through Harvester's containerd-registry setting
  missing          no node has it and nothing pulls it: the plan refuses
  unknown          the ISO has no image list of the running release

and the new release's image archives (imported by ImagePreload, or copied to
disk for rancher-system-agent), and the images a mirror must hold. The
release is read from the ISO of a Version of the cluster (--version, over
HTTP range requests: only the few files needed are read), from an ISO file
or URL (--iso), or from a running upgrade repo (--repo-url). The running
release is --from, else the cluster's server-version setting; the cluster's
containerd-registry setting is read when the cluster is reachable.

-o prints the report as data, as kubectl does: json, yaml, jsonpath=,
go-template=, custom-columns=.` + exitCodesHelp(0, exitFailure, usageExitCode, exitCheckFailed, exitUnreachable),
		Example: `  upgrade-toolkit images --version v1.8.0
  upgrade-toolkit images --iso harvester-v1.8.0-amd64.iso --from v1.7.1 -o json
  upgrade-toolkit images --version v1.8.0 --image-mirror registry.example.com:5000 --push-list |
    while read src dst; do skopeo copy "docker://$src" "docker://$dst"; done`,
		Args: usageArgs(cobra.NoArgs),
	}
	kube := addClusterFlags(cmd, true)
	output := addOutputFlags(cmd, "text", false)
	f := cmd.Flags()
	f.StringVar(&o.version, "version", "", "the Version (harvester-system) to upgrade to: its ISO is read over HTTP")
	f.StringVar(&o.iso, "iso", "", "the release ISO: a file, or an http(s) URL served with range requests")
	f.StringVar(&o.repoURL, "repo-url", "", "a running upgrade repo's base URL (http://<plan>-repo.harvester-system.svc/harvester-iso/)")
	f.StringVar(&o.from, "from", "", "the release the cluster runs (default: the cluster's server-version setting)")
	f.StringVar(&o.upgrade, "upgrade", "", "as spec.upgrade: the toolkit image's tag for every workload")
	f.StringVar(&o.repository, "toolkit-image-repository", o.repository, "as the manager's flag, or a plan's management.harvesterhci.io/upgrade-toolkit-image")
	f.Var(mirrorFlag{&o.mirror}, "image-mirror", "as the manager's flag: the registry every workload's image is pulled from")
	f.BoolVar(&o.skipPreload, "skip-preload", false, "as a negative spec.imagePreloadOption.concurrency: ImagePreload imports nothing")
	f.BoolVar(&o.pushList, "push-list", false, "print only the images a mirror must hold, one per line (with --image-mirror: each followed by its copy in the mirror)")
	cmd.SetFlagErrorFunc(flagUsageError)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		given := 0
		for _, s := range []string{o.version, o.iso, o.repoURL} {
			if s != "" {
				given++
			}
		}
		if given != 1 {
			return usageError("give exactly one of --version, --iso and --repo-url")
		}
		var err error
		if o.printer, err = output.printer(); err != nil {
			return err
		}
		if err := kube.check(c); err != nil {
			return err
		}
		return runImages(c.Context(), o, clusterReader(kube), c.OutOrStdout())
	}
	return cmd
}

// clusterReader connects to the cluster of --kubeconfig and --context when
// asked: the command needs one for --version, and reads the running version
// and the containerd-registry setting from it when it can.
func clusterReader(kube *clusterFlags) func() (client.Reader, error) {
	var once sync.Once
	var c client.Reader
	var err error
	return func() (client.Reader, error) {
		once.Do(func() { c, err = kube.client() })
		return c, err
	}
}

// imagesJSON is the command's JSON output: the report and the checks a
// plan would run on it.
type imagesJSON struct {
	images.Report
	Source string      `json:"source"`
	Checks []checkJSON `json:"checks"`
}

type checkJSON struct {
	Verdict string `json:"verdict"`
	Message string `json:"message"`
}

var verdictWords = map[v1beta1.CheckResult]string{v1beta1.CheckPassed: "PASS", v1beta1.CheckWarning: "WARN", v1beta1.CheckFailed: "FAIL", v1beta1.CheckPending: "WAIT"}

func runImages(ctx context.Context, o imagesOptions, reach func() (client.Reader, error), w io.Writer) error {
	content, source, err := releaseContent(ctx, o, reach)
	if err != nil {
		return err
	}
	var registries images.Registries
	if o.from == "" || o.version != "" {
		c, err := reach()
		if err != nil {
			return fmt.Errorf("%w (give --from to read no cluster)", err)
		}
		if o.from == "" {
			if o.from, err = serverVersion(ctx, c); err != nil {
				return err
			}
		}
		if registries, err = containerdRegistry(ctx, c); err != nil {
			return err
		}
	}
	rel, err := images.Read(ctx, content, o.from)
	if err != nil {
		return fmt.Errorf("reading the release from %s: %w", source, err)
	}
	f := images.Facts{
		Toolkit:        images.Toolkit{Repository: o.repository, Tag: o.upgrade, Running: o.from, Target: rel.Release.Harvester, Mirror: o.mirror},
		PreloadSkipped: o.skipPreload, Registries: registries,
	}
	rep := images.NewReport(f, rel)
	f.RunningImages, f.Archives = rel.Running, rel.Archives
	checks := preflight.Images(f, rel.Images())
	switch {
	case o.pushList:
		for _, c := range rep.Push {
			if _, err := fmt.Fprintln(w, strings.TrimSpace(c.Image+" "+c.Mirror)); err != nil {
				return err
			}
		}
	case o.printer != nil:
		out := imagesJSON{Report: rep, Source: source}
		for _, v := range checks {
			out.Checks = append(out.Checks, checkJSON{Verdict: verdictWords[v.Result], Message: v.Message})
		}
		err = printData(w, o.printer, out, nil)
	default:
		err = writeImagesText(w, rep, source, checks)
	}
	if err != nil {
		return err
	}
	for _, v := range checks {
		if v.Result == v1beta1.CheckFailed {
			return &exitError{code: exitCheckFailed, err: errors.New("an image of the upgrade is on no node and nothing pulls it: a plan would refuse to start (see the checks)")}
		}
	}
	return nil
}

// releaseContent opens the release the options name, and says what it is.
func releaseContent(ctx context.Context, o imagesOptions, reach func() (client.Reader, error)) (images.Content, string, error) {
	switch {
	case o.repoURL != "":
		c, err := release.NewClient(o.repoURL)
		return c, "the repo at " + o.repoURL, err
	case o.iso != "":
		fsys, err := openISO(ctx, o.iso)
		return images.FS{FS: fsys}, o.iso, err
	}
	c, err := reach()
	if err != nil {
		return nil, "", err
	}
	v := &harvesterv1beta1.Version{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: o.version}, v); err != nil {
		return nil, "", fmt.Errorf("reading Version %s/%s: %w", cluster.HarvesterNamespace, o.version, err)
	}
	if v.Spec.ISOURL == "" {
		return nil, "", fmt.Errorf("version %s/%s has no spec.isoURL", cluster.HarvesterNamespace, o.version)
	}
	fsys, err := openISO(ctx, v.Spec.ISOURL)
	return images.FS{FS: fsys}, fmt.Sprintf("Version %s (%s)", o.version, v.Spec.ISOURL), err
}

// openISO opens an ISO file, or an ISO at an http(s) URL read with range
// requests.
func openISO(ctx context.Context, location string) (*iso9660.Image, error) {
	if !strings.HasPrefix(location, "http://") && !strings.HasPrefix(location, "https://") {
		img, err := iso9660.OpenFile(location)
		if err != nil {
			return nil, fmt.Errorf("opening the ISO %s: %w", location, err)
		}
		return img, nil
	}
	r, err := newRangeReader(ctx, location)
	if err != nil {
		return nil, err
	}
	img, err := iso9660.New(r, r.size)
	if err != nil {
		return nil, fmt.Errorf("reading the ISO at %s: %w", location, err)
	}
	return img, nil
}

// rangeReader reads a file over HTTP with range requests, a block at a
// time, keeping the blocks it read: the ISO's directory records and the
// few small files read are a few MiB of a multi-GiB image.
type rangeReader struct {
	ctx    context.Context
	url    string
	size   int64
	blocks map[int64][]byte
}

const rangeBlock = 1 << 20

func newRangeReader(ctx context.Context, url string) (*rangeReader, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the ISO at %s: %w", url, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HEAD %s: %s", url, resp.Status)
	}
	size, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if err != nil || size <= 0 || resp.Header.Get("Accept-Ranges") != "bytes" {
		return nil, fmt.Errorf("%s does not serve byte ranges of a known size: download the ISO and give its path to --iso", url)
	}
	return &rangeReader{ctx: ctx, url: url, size: size, blocks: map[int64][]byte{}}, nil
}

// ReadAt implements io.ReaderAt.
func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= r.size {
			return n, io.EOF
		}
		b, err := r.block(at / rangeBlock)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], b[at%rangeBlock:])
	}
	return n, nil
}

func (r *rangeReader) block(i int64) ([]byte, error) {
	if b, ok := r.blocks[i]; ok {
		return b, nil
	}
	start, end := i*rangeBlock, min((i+1)*rangeBlock, r.size)-1
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", start, end))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading bytes %d-%d of %s: %w", start, end, r.url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusPartialContent {
		return nil, fmt.Errorf("reading bytes %d-%d of %s: %s", start, end, r.url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, end-start+1))
	if err != nil {
		return nil, fmt.Errorf("reading bytes %d-%d of %s: %w", start, end, r.url, err)
	}
	if int64(len(b)) != end-start+1 {
		return nil, fmt.Errorf("reading bytes %d-%d of %s: got %d bytes", start, end, r.url, len(b))
	}
	r.blocks[i] = b
	return b, nil
}

// serverVersion is the release the cluster runs.
func serverVersion(ctx context.Context, c client.Reader) (string, error) {
	s := &harvesterv1beta1.Setting{}
	if err := c.Get(ctx, client.ObjectKey{Name: cluster.ServerVersionSetting}, s); err != nil {
		return "", fmt.Errorf("reading the running release (setting %s; or give --from): %w", cluster.ServerVersionSetting, err)
	}
	v := s.Value
	if v == "" {
		v = s.Default
	}
	if v == "" {
		return "", fmt.Errorf("the setting %s is empty: give --from", cluster.ServerVersionSetting)
	}
	return v, nil
}

// containerdRegistry is the cluster's containerd-registry setting (none
// when it has none).
func containerdRegistry(ctx context.Context, c client.Reader) (images.Registries, error) {
	s := &harvesterv1beta1.Setting{}
	err := c.Get(ctx, client.ObjectKey{Name: cluster.ContainerdRegistrySetting}, s)
	if apierrors.IsNotFound(err) {
		return images.Registries{}, nil
	}
	if err != nil {
		return images.Registries{}, fmt.Errorf("reading the setting %s: %w", cluster.ContainerdRegistrySetting, err)
	}
	value := s.Value
	if value == "" {
		value = s.Default
	}
	return images.ParseRegistries(value)
}

func writeImagesText(w io.Writer, rep images.Report, source string, checks []preflight.Verdict) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Images of the upgrade from %s to %s (%s)\n", rep.Running, rep.Target, source)
	switch {
	case rep.Mirror != "":
		fmt.Fprintf(&b, "mirror: %s (every workload's image is pulled from it)\n", rep.Mirror)
	default:
		b.WriteString("mirror: none (each workload runs an image its node has, or pulls through containerd-registry)\n")
	}
	b.WriteString("\nWORKLOADS (in the order the upgrade runs them)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "  PHASE\tWORKLOAD\tRUNS ON\tIMAGE\tFROM")
	for _, e := range rep.Workloads {
		_, _ = fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s: %s\n", e.Phase, e.Name, e.Where, e.Image, e.Origin, e.Detail)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "\nRELEASE %s: %d images in %d archives\n", rep.Target, countImages(rep.Release), len(rep.Release))
	for _, a := range rep.Release {
		how := "imported on every node by ImagePreload"
		if !a.Imported {
			how = "copied to disk for rancher-system-agent"
		}
		fmt.Fprintf(&b, "  %s (%d images, %s)\n", a.Path, len(a.Images), how)
		for _, img := range a.Images {
			fmt.Fprintf(&b, "    %s\n", img)
		}
	}
	b.WriteString("\nTO PUSH TO A MIRROR (what --image-mirror's registry must hold)\n")
	for _, c := range rep.Push {
		if c.Mirror != "" {
			fmt.Fprintf(&b, "  %s -> %s (%s)\n", c.Image, c.Mirror, c.For)
		} else {
			fmt.Fprintf(&b, "  %s (%s)\n", c.Image, c.For)
		}
	}
	b.WriteString("\nCHECKS (as the upgrade runs them in MetadataPopulate)\n")
	for _, v := range checks {
		fmt.Fprintf(&b, "  %s  %s\n", verdictWords[v.Result], v.Message)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func countImages(archives []images.Archive) int {
	seen := map[string]bool{}
	for _, a := range archives {
		for _, img := range a.Images {
			seen[img] = true
		}
	}
	return len(seen)
}
