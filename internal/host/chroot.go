package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"
)

// Where the host keeps what the jobs use.
const (
	// RKE2Bin links to the directory of the running RKE2's tools (ctr,
	// crictl, kubectl).
	RKE2Bin = "/var/lib/rancher/rke2/bin"
	// ContainerdSocket is RKE2's containerd.
	ContainerdSocket = "/run/k3s/containerd/containerd.sock"
	// StaticPodManifests are the kubelet's static pods; they are removed
	// before the reboot so that the kubelet does not start the old control
	// plane first (harvester/harvester#2865).
	StaticPodManifests = "/var/lib/rancher/rke2/agent/pod-manifests"
	// cosState is the partition the OS images live on, mounted read-only.
	cosState = "/run/initramfs/cos-state"
	// rootfsMount and elementalConfig are temporary directories of the OS
	// upgrade; hostElemental is where the job's elemental binary is copied.
	rootfsMount     = "/tmp/upgrade-rootfs"
	elementalConfig = "/tmp/upgrade-elemental"
	hostElemental   = "/tmp/elemental"
	// UpgradeTmp holds downloads and logs of the upgrade on the host's
	// persistent storage.
	UpgradeTmp = "/usr/local/upgrade_tmp"
	// rebootScript and rebootUnit make the node reboot after the job.
	rebootScript = "/tmp/upgrade-reboot.sh"
	rebootUnit   = "upgrade-reboot.service"
	// activeImageSizeMiB is the size elemental gives the new system image.
	activeImageSizeMiB = 3072
)

// Chroot is the Host of a node job: the host's root file system is mounted
// at Root in the job's privileged container, files are changed there, and
// the host's own tools (containerd's ctr, crictl, systemctl, mount, grub)
// run with chroot Root, as the upgrade scripts of Harvester do.
type Chroot struct {
	// Root is where the host's "/" is mounted (/host).
	Root string
	// Run runs the commands.
	Run Runner
	// Elemental is the elemental binary of the job's image, which knows the
	// new release's image format better than the host's.
	Elemental string
	// Lib64 and Lib are the job image's /lib64 and /lib, bind-mounted over
	// the host's while Elemental runs when the host's glibc is too old for
	// it (ARM's loader is in /lib).
	Lib64, Lib string
	// Now names the elemental log file.
	Now func() time.Time
}

// NewChroot returns the Host of the node whose root is mounted at root.
func NewChroot(root string) *Chroot {
	return &Chroot{Root: root, Run: Exec{}, Elemental: "/usr/local/bin/elemental", Lib64: "/lib64", Lib: "/lib", Now: time.Now}
}

var _ Host = (*Chroot)(nil)

// path is a host path as the job's container sees it.
func (h *Chroot) path(p string) string { return filepath.Join(h.Root, p) }

func (h *Chroot) chroot(name string, args ...string) Command {
	return Command{Name: "chroot", Args: append([]string{h.Root, name}, args...)}
}

func (h *Chroot) ctr(args ...string) Command {
	return h.chroot(RKE2Bin+"/ctr", append([]string{"--address", ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
}

func (h *Chroot) run(ctx context.Context, c Command) (string, error) {
	out, err := h.Run.Run(ctx, c)
	return string(out), err
}

// Images implements Host.
func (h *Chroot) Images(ctx context.Context) ([]string, error) {
	out, err := h.run(ctx, h.ctr("images", "ls", "--quiet"))
	if err != nil {
		return nil, fmt.Errorf("listing containerd's images: %w", err)
	}
	var refs []string
	for _, line := range strings.Fields(out) {
		if !strings.HasPrefix(line, "sha256:") {
			refs = append(refs, line)
		}
	}
	return refs, nil
}

// ImportImages implements Host: the archive is decompressed here and
// streamed into ctr.
func (h *Chroot) ImportImages(ctx context.Context, name string, archive io.Reader) error {
	zr, err := zstd.NewReader(archive)
	if err != nil {
		return fmt.Errorf("importing %s: %w", name, err)
	}
	defer zr.Close()
	c := h.ctr("images", "import", "--no-unpack", "-")
	c.Stdin = zr
	if _, err := h.run(ctx, c); err != nil {
		return fmt.Errorf("importing %s into containerd: %w", name, err)
	}
	return nil
}

// RemoveImage implements Host.
func (h *Chroot) RemoveImage(ctx context.Context, ref string) error {
	_, err := h.run(ctx, h.chroot(RKE2Bin+"/crictl", "--runtime-endpoint", "unix://"+ContainerdSocket, "rmi", ref))
	return err
}

// FileExists implements Host.
func (h *Chroot) FileExists(_ context.Context, p string) (bool, error) {
	_, err := os.Stat(h.path(p))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// WriteFile implements Host: it writes a temporary file next to the target
// and renames it.
func (h *Chroot) WriteFile(_ context.Context, p string, content io.Reader, perm fs.FileMode) error {
	target := h.path(p)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, content); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", p, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

// Remove implements Host.
func (h *Chroot) Remove(_ context.Context, p string) error {
	return os.RemoveAll(h.path(p))
}

// RestartService implements Host.
func (h *Chroot) RestartService(ctx context.Context, unit string) error {
	if _, err := h.run(ctx, h.chroot("systemctl", "daemon-reload")); err != nil {
		return err
	}
	_, err := h.run(ctx, h.chroot("systemctl", "restart", unit))
	return err
}

// OSPrettyName implements Host.
func (h *Chroot) OSPrettyName(_ context.Context) (string, error) {
	data, err := os.ReadFile(h.path("/etc/os-release"))
	if err != nil {
		return "", err
	}
	return osReleaseValue(data, "PRETTY_NAME"), nil
}

// osReleaseValue returns a key's value in os-release(5) content.
func osReleaseValue(data []byte, key string) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || k != key {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			return u
		}
		return strings.Trim(v, `'"`)
	}
	return ""
}

// CPUCount implements Host: the CPUs this process may run on, which is
// what `nproc` on the host reports for the job's privileged pod.
func (h *Chroot) CPUCount(context.Context) (int, error) { return runtime.NumCPU(), nil }

// UpgradeOS implements Host: it mounts the squashfs and runs elemental
// upgrade from it, after repairing what makes elemental fail on older
// nodes, then sets the boot options the new release needs.
func (h *Chroot) UpgradeOS(ctx context.Context, rootfs string) error {
	logger := log.FromContext(ctx)
	if err := h.mountRootfs(ctx, rootfs); err != nil {
		return err
	}
	defer func() {
		if _, err := h.run(context.WithoutCancel(ctx), h.chroot("umount", rootfsMount)); err != nil {
			logger.Error(err, "unmounting the new OS image")
		}
	}()
	config := fmt.Sprintf("upgrade:\n  system:\n    size: %d\n", activeImageSizeMiB)
	if err := h.WriteFile(ctx, elementalConfig+"/config.yaml", strings.NewReader(config), 0o644); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{h.removeIncompleteState, h.sparsifyPassive, h.mountStateForMultipath, h.elementalUpgrade} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	for _, step := range []func(context.Context) error{h.ensureGrubFiles, h.disableMultipath, h.blacklistLonghornMultipath, h.fixSFTPServer, h.pinNICNames} {
		if err := step(ctx); err != nil {
			return fmt.Errorf("the new OS is installed, but setting it up failed: %w", err)
		}
	}
	return h.Remove(ctx, rootfs)
}

func (h *Chroot) mountRootfs(ctx context.Context, rootfs string) error {
	if err := os.MkdirAll(h.path(rootfsMount), 0o755); err != nil {
		return err
	}
	// A job that restarts finds the image still mounted.
	if _, err := h.run(ctx, h.chroot("mountpoint", "-q", rootfsMount)); err == nil {
		if _, err := h.run(ctx, h.chroot("umount", rootfsMount)); err != nil {
			return err
		}
	}
	if _, err := h.run(ctx, h.chroot("mount", "-t", "squashfs", "-o", "loop,ro", rootfs, rootfsMount)); err != nil {
		return fmt.Errorf("mounting the new OS image: %w", err)
	}
	return nil
}

// withStateWritable runs fn with the state partition mounted read-write.
func (h *Chroot) withStateWritable(ctx context.Context, fn func() error) error {
	if _, err := h.run(ctx, h.chroot("mount", "-o", "remount,rw", cosState)); err != nil {
		return err
	}
	ferr := fn()
	_, err := h.run(ctx, h.chroot("mount", "-o", "remount,ro", cosState))
	return errors.Join(ferr, err)
}

// removeIncompleteState moves away a state.yaml without the state
// partition's label, which makes elemental fail (harvester/harvester#4526).
func (h *Chroot) removeIncompleteState(ctx context.Context) error {
	file := cosState + "/state.yaml"
	data, err := os.ReadFile(h.path(file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var state struct {
		State map[string]any `json:"state"`
	}
	if err := yaml.Unmarshal(data, &state); err == nil {
		if _, ok := state.State["label"]; ok {
			return nil
		}
	}
	log.FromContext(ctx).Info("moving away an incomplete elemental state file", "file", file)
	return h.withStateWritable(ctx, func() error { return os.Rename(h.path(file), h.path(file+".bak")) })
}

// sparsifyPassive punches holes in the passive image so that the state
// partition has room for the new one (harvester/harvester#7518).
func (h *Chroot) sparsifyPassive(ctx context.Context) error {
	img := cosState + "/cOS/passive.img"
	if ok, err := h.FileExists(ctx, img); err != nil || !ok {
		return err
	}
	return h.withStateWritable(ctx, func() error {
		_, err := h.run(ctx, h.chroot("fallocate", "--dig-holes", img))
		return err
	})
}

// mountStateForMultipath mounts the state partition where elemental looks
// for it when the boot disk is a multipath device, which elemental would
// otherwise mount read-only.
func (h *Chroot) mountStateForMultipath(ctx context.Context) error {
	// blkid fails when no partition has the label: then there is nothing
	// to mount either.
	dev, _ := h.run(ctx, h.chroot("blkid", "-L", "COS_STATE"))
	if !strings.Contains(dev, "mapper") {
		return nil
	}
	if _, err := h.run(ctx, h.chroot("mountpoint", "-q", "/run/cos/state")); err == nil {
		return nil
	}
	if err := os.MkdirAll(h.path("/run/cos/state"), 0o755); err != nil {
		return err
	}
	_, err := h.run(ctx, h.chroot("mount", "-L", "COS_STATE", "/run/cos/state"))
	return err
}

func (h *Chroot) elementalUpgrade(ctx context.Context) error {
	bin, err := os.Open(h.Elemental)
	if err != nil {
		return fmt.Errorf("the job image has no elemental binary: %w", err)
	}
	defer func() { _ = bin.Close() }()
	if err := h.WriteFile(ctx, hostElemental, bin, 0o755); err != nil {
		return err
	}
	// An elemental built for a newer OS needs a newer glibc than an older
	// host has; the job image's libraries are lent to it for the upgrade.
	out, _ := h.Run.Run(ctx, h.chroot(hostElemental, "version"))
	if bytes.Contains(out, []byte("GLIBC")) && bytes.Contains(out, []byte("not found")) {
		for _, lib := range []struct{ image, host string }{{h.Lib64, "/lib64"}, {h.Lib, "/lib"}} {
			if lib.image == "" {
				continue
			}
			if _, err := h.run(ctx, Command{Name: "mount", Args: []string{"-o", "bind", lib.image, h.path(lib.host)}}); err != nil {
				return err
			}
			defer func() {
				_, _ = h.run(context.WithoutCancel(ctx), Command{Name: "umount", Args: []string{h.path(lib.host)}})
			}()
		}
	}
	logFile := fmt.Sprintf("%s/elemental-upgrade-%s.log", UpgradeTmp, h.Now().UTC().Format("20060102150405"))
	if err := os.MkdirAll(h.path(UpgradeTmp), 0o755); err != nil {
		return err
	}
	_, err = h.run(ctx, h.chroot(hostElemental, "upgrade", "--logfile", logFile, "--directory", rootfsMount, "--config-dir", elementalConfig, "--debug"))
	if err != nil {
		return fmt.Errorf("elemental upgrade failed (its log is %s on the node): %w", logFile, err)
	}
	return nil
}

// ensureGrubFiles creates the grub environment and custom files some
// firmware searches for a long time when they are missing.
func (h *Chroot) ensureGrubFiles(ctx context.Context) error {
	if ok, err := h.FileExists(ctx, "/oem/grubenv"); err != nil {
		return err
	} else if !ok {
		if _, err := h.run(ctx, h.chroot("grub2-editenv", "/oem/grubenv", "create")); err != nil {
			return err
		}
	}
	if ok, err := h.FileExists(ctx, "/oem/grubcustom"); err != nil || ok {
		return err
	}
	return h.WriteFile(ctx, "/oem/grubcustom", strings.NewReader(""), 0o644)
}

const kernelArgsKey = "third_party_kernel_args"

func (h *Chroot) kernelArgs(ctx context.Context) (string, error) {
	out, err := h.run(ctx, h.chroot("grub2-editenv", "/oem/grubenv", "list"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, kernelArgsKey+"="); ok {
			return v, nil
		}
	}
	return "", nil
}

func (h *Chroot) setKernelArgs(ctx context.Context, args string) error {
	_, err := h.run(ctx, h.chroot("grub2-editenv", "/oem/grubenv", "set", kernelArgsKey+"="+strings.Join(strings.Fields(args), " ")))
	return err
}

// disableMultipath boots with multipath=off unless the node uses external
// storage or the kernel arguments already say.
func (h *Chroot) disableMultipath(ctx context.Context) error {
	data, err := os.ReadFile(h.path("/oem/harvester.config"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var config struct {
		OS struct {
			ExternalStorage struct {
				Enabled bool `json:"enabled"`
			} `json:"externalstorage"`
		} `json:"os"`
	}
	if len(data) > 0 {
		if err := yaml.Unmarshal(data, &config); err != nil {
			return fmt.Errorf("reading /oem/harvester.config: %w", err)
		}
	}
	if config.OS.ExternalStorage.Enabled {
		return nil
	}
	args, err := h.kernelArgs(ctx)
	if err != nil || strings.Contains(args, "multipath") {
		return err
	}
	return h.setKernelArgs(ctx, args+" multipath=off")
}

// blacklistLonghornMultipath keeps multipathd off Longhorn's iSCSI
// devices, as Longhorn's documentation asks.
func (h *Chroot) blacklistLonghornMultipath(ctx context.Context) error {
	const conf = `blacklist {
  device {
    vendor "IET"
    product "VIRTUAL-DISK"
  }
}
`
	stage := fmt.Sprintf(`name: "keep multipathd off Longhorn volumes"
stages:
  initramfs:
    - directories:
        - path: /etc/multipath/conf.d
          permissions: 0755
      files:
        - path: /etc/multipath/conf.d/99-longhorn.conf
          permissions: 0644
          content: %s
`, strconv.Quote(conf))
	return h.WriteFile(ctx, "/oem/99_disable_lh_multipathd.yaml", strings.NewReader(stage), 0o600)
}

// fixSFTPServer points sshd's sftp subsystem at the new OS's path.
func (h *Chroot) fixSFTPServer(ctx context.Context) error {
	const file = "/etc/ssh/sshd_config.d/sftp.conf"
	data, err := os.ReadFile(h.path(file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fixed := bytes.ReplaceAll(data, []byte("/usr/lib/ssh/sftp-server"), []byte("/usr/libexec/ssh/sftp-server"))
	if bytes.Equal(fixed, data) {
		return nil
	}
	return h.WriteFile(ctx, file, bytes.NewReader(fixed), 0o644)
}

// pinNICNames keeps every en* interface's name across the OS change with
// ifname=<name>:<mac> kernel arguments (harvester/harvester#9802).
func (h *Chroot) pinNICNames(ctx context.Context) error {
	entries, err := os.ReadDir(h.path("/sys/class/net"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	args, err := h.kernelArgs(ctx)
	if err != nil {
		return err
	}
	changed := false
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "en") {
			continue
		}
		mac, err := os.ReadFile(h.path("/sys/class/net/" + e.Name() + "/address"))
		if err != nil {
			continue
		}
		m := strings.TrimSpace(string(mac))
		if m == "" || strings.Contains(args, ":"+m) {
			continue
		}
		args += " ifname=" + e.Name() + ":" + m
		changed = true
	}
	if !changed {
		return nil
	}
	return h.setKernelArgs(ctx, args)
}

// RebootAfterJob implements Host: a transient systemd service on the host
// checks every 10 seconds whether the job's container has exited with code
// 0 and then reboots the node.
func (h *Chroot) RebootAfterJob(ctx context.Context, job JobContainer) error {
	script := fmt.Sprintf(`#!/bin/sh
# Written by an upgrade-toolkit node job: reboot once the job's container
# %s has exited with code 0. systemd runs this every 10 seconds.
export PATH=%s:/usr/sbin:/usr/bin:/sbin:/bin
export CONTAINER_RUNTIME_ENDPOINT=unix://%s
pod=$(crictl pods --namespace %s --name '^%s$' --quiet | head -n 1)
[ -n "$pod" ] || exit 1
container=$(crictl ps --all --pod "$pod" --name '^%s$' --quiet | head -n 1)
[ -n "$container" ] || exit 1
[ "$(crictl inspect --output go-template --template '{{.status.state}} {{.status.exitCode}}' "$container")" = "CONTAINER_EXITED 0" ] || exit 1
sleep 10
rm -f %s/*
reboot
`, job, RKE2Bin, ContainerdSocket, job.Namespace, job.Pod, job.Container, StaticPodManifests)
	unit := fmt.Sprintf(`[Unit]
Description=Reboot into the upgraded OS once the upgrade-toolkit job %s succeeded
[Service]
Type=simple
ExecStart=/bin/sh %s
Restart=always
RestartSec=10
`, job, rebootScript)
	if err := h.WriteFile(ctx, rebootScript, strings.NewReader(script), 0o755); err != nil {
		return err
	}
	if err := h.WriteFile(ctx, "/run/systemd/system/"+rebootUnit, strings.NewReader(unit), 0o644); err != nil {
		return err
	}
	if _, err := h.run(ctx, h.chroot("systemctl", "daemon-reload")); err != nil {
		return err
	}
	_, err := h.run(ctx, h.chroot("systemctl", "start", rebootUnit))
	return err
}
