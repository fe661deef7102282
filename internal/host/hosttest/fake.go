// Package hosttest provides a Host that records what a node job asks of the
// node instead of doing it, for tests and for the simulator.
package hosttest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/harvester/upgrade-toolkit/internal/host"
)

// Fake is a node in memory. It records every operation that changes the
// node, in order, as a line such as "write /etc/x" (see Ops); reads are not
// recorded. The zero value is a node without images or files; set the
// exported fields before use.
type Fake struct {
	mu  sync.Mutex
	ops []string

	// Present are the images containerd has.
	Present []string
	// ArchiveImages are the images each archive (by the name given to
	// ImportImages) adds to Present when imported.
	ArchiveImages map[string][]string
	// Files are the node's files by path.
	Files map[string][]byte
	// PrettyName is the running OS's PRETTY_NAME.
	PrettyName string
	// CPUs is the CPU count (default 4).
	CPUs int
	// Errors makes operations fail: the key is an operation as Ops records
	// it ("upgrade-os /usr/local/upgrade_tmp/rootfs.squashfs") or its verb
	// alone ("upgrade-os").
	Errors map[string]error
	// OnUpgradeOS and OnReboot, when set, run after the operation is
	// recorded, e.g. to play the node's reboot in a simulation.
	OnUpgradeOS func(ctx context.Context, rootfs string) error
	OnReboot    func(ctx context.Context, job host.JobContainer) error
	// Observe, when set, sees every recorded operation as it happens, e.g.
	// to order it among other events of a test.
	Observe func(op string)
}

var _ host.Host = (*Fake)(nil)

// Ops returns the operations recorded so far.
func (f *Fake) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

// ResetOps forgets the recorded operations.
func (f *Fake) ResetOps() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = nil
}

// File returns a file's content and whether it exists.
func (f *Fake) File(path string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.Files[path]
	return b, ok
}

// record records an operation and returns the error injected for it.
func (f *Fake) record(verb, arg string) error {
	op := strings.TrimSpace(verb + " " + arg)
	f.ops = append(f.ops, op)
	if f.Observe != nil {
		f.Observe(op)
	}
	if err := f.Errors[op]; err != nil {
		return err
	}
	return f.Errors[verb]
}

// Images implements host.Host.
func (f *Fake) Images(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Present), f.Errors["images"]
}

// ImportImages implements host.Host; it reads the whole archive.
func (f *Fake) ImportImages(_ context.Context, name string, archive io.Reader) error {
	if _, err := io.Copy(io.Discard, archive); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("import-images", name); err != nil {
		return err
	}
	for _, img := range f.ArchiveImages[name] {
		if !slices.Contains(f.Present, img) {
			f.Present = append(f.Present, img)
		}
	}
	return nil
}

// RemoveImage implements host.Host.
func (f *Fake) RemoveImage(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("remove-image", ref); err != nil {
		return err
	}
	f.Present = slices.DeleteFunc(f.Present, func(s string) bool { return s == ref })
	return nil
}

// FileExists implements host.Host; a path is a directory when a file is
// under it.
func (f *Fake) FileExists(_ context.Context, path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.Files[path]; ok {
		return true, nil
	}
	for p := range f.Files {
		if strings.HasPrefix(p, strings.TrimSuffix(path, "/")+"/") {
			return true, nil
		}
	}
	return false, nil
}

// WriteFile implements host.Host; it reads the whole content.
func (f *Fake) WriteFile(_ context.Context, path string, content io.Reader, _ fs.FileMode) error {
	data, err := io.ReadAll(content)
	if err != nil {
		return fmt.Errorf("reading the content of %s: %w", path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("write", path); err != nil {
		return err
	}
	if f.Files == nil {
		f.Files = map[string][]byte{}
	}
	f.Files[path] = data
	return nil
}

// Remove implements host.Host.
func (f *Fake) Remove(_ context.Context, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("remove", path); err != nil {
		return err
	}
	for p := range f.Files {
		if p == path || strings.HasPrefix(p, strings.TrimSuffix(path, "/")+"/") {
			delete(f.Files, p)
		}
	}
	return nil
}

// RestartService implements host.Host.
func (f *Fake) RestartService(_ context.Context, unit string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record("restart-service", unit)
}

// OSPrettyName implements host.Host.
func (f *Fake) OSPrettyName(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.PrettyName, f.Errors["os-pretty-name"]
}

// CPUCount implements host.Host.
func (f *Fake) CPUCount(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.CPUs == 0 {
		return 4, nil
	}
	return f.CPUs, nil
}

// UpgradeOS implements host.Host; like the real one it removes the image.
func (f *Fake) UpgradeOS(ctx context.Context, rootfs string) error {
	f.mu.Lock()
	err := f.record("upgrade-os", rootfs)
	if err == nil {
		delete(f.Files, rootfs)
	}
	hook := f.OnUpgradeOS
	f.mu.Unlock()
	if err != nil || hook == nil {
		return err
	}
	return hook(ctx, rootfs)
}

// RebootAfterJob implements host.Host.
func (f *Fake) RebootAfterJob(ctx context.Context, job host.JobContainer) error {
	f.mu.Lock()
	err := f.record("reboot-after-job", job.String())
	hook := f.OnReboot
	f.mu.Unlock()
	if err != nil || hook == nil {
		return err
	}
	return hook(ctx, job)
}
