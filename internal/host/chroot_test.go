package host_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/harvester/upgrade-toolkit/internal/host"
)

// script is a Runner that records the commands and answers them.
type script struct {
	cmds  []string
	stdin [][]byte
	// answers maps a command (as recorded, with the root as ROOT) to its
	// stdout and error.
	answers map[string]answer
	root    string
}

type answer struct {
	out string
	err error
}

func (s *script) Run(_ context.Context, c host.Command) ([]byte, error) {
	line := strings.ReplaceAll(c.String(), s.root, "ROOT")
	s.cmds = append(s.cmds, line)
	if c.Stdin != nil {
		b, err := io.ReadAll(c.Stdin)
		if err != nil {
			return nil, err
		}
		s.stdin = append(s.stdin, b)
	}
	a := s.answers[line]
	return []byte(a.out), a.err
}

func newHost(t *testing.T, answers map[string]answer) (*host.Chroot, *script) {
	root := t.TempDir()
	s := &script{answers: answers, root: root}
	h := host.NewChroot(root)
	h.Run = s
	h.Now = func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) }
	return h, s
}

func put(t *testing.T, h *host.Chroot, path, content string) {
	t.Helper()
	if err := h.WriteFile(t.Context(), path, strings.NewReader(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, h *host.Chroot, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const ctr = "chroot ROOT /var/lib/rancher/rke2/bin/ctr --address /run/k3s/containerd/containerd.sock --namespace k8s.io"

func TestImages(t *testing.T) {
	h, s := newHost(t, map[string]answer{ctr + " images ls --quiet": {out: "docker.io/rancher/a:v1\nsha256:0123\ndocker.io/rancher/b:v2\n"}})
	got, err := h.Images(t.Context())
	if err != nil || !slices.Equal(got, []string{"docker.io/rancher/a:v1", "docker.io/rancher/b:v2"}) {
		t.Errorf("Images = %v, %v", got, err)
	}
	if len(s.cmds) != 1 {
		t.Errorf("commands %v", s.cmds)
	}
}

func TestImportImagesDecompressesIntoCtr(t *testing.T) {
	h, s := newHost(t, nil)
	tarball := bytes.Repeat([]byte("image layer "), 1000)
	enc, _ := zstd.NewWriter(nil)
	archive := enc.EncodeAll(tarball, nil)
	if err := h.ImportImages(t.Context(), "x.tar.zst", bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	if want := []string{ctr + " images import --no-unpack -"}; !slices.Equal(s.cmds, want) {
		t.Errorf("commands %v, want %v", s.cmds, want)
	}
	if len(s.stdin) != 1 || !bytes.Equal(s.stdin[0], tarball) {
		t.Error("ctr did not get the decompressed archive")
	}
	if err := h.ImportImages(t.Context(), "bad.tar.zst", strings.NewReader("not zstd")); err == nil {
		t.Error("a corrupt archive was imported")
	}
}

func TestWriteFileIsAtomic(t *testing.T) {
	h, _ := newHost(t, nil)
	put(t, h, "/etc/rancher/rke2/config.yaml.d/x.yaml", "a: 1\n")
	if got := read(t, h, "/etc/rancher/rke2/config.yaml.d/x.yaml"); got != "a: 1\n" {
		t.Errorf("content %q", got)
	}
	broken := io.MultiReader(strings.NewReader("half"), errReader{})
	if err := h.WriteFile(t.Context(), "/usr/local/upgrade_tmp/rootfs.squashfs", broken, 0o644); err == nil {
		t.Fatal("a broken download was written")
	}
	if ok, _ := h.FileExists(t.Context(), "/usr/local/upgrade_tmp/rootfs.squashfs"); ok {
		t.Error("a broken download left the file behind")
	}
	entries, _ := os.ReadDir(filepath.Join(h.Root, "/usr/local/upgrade_tmp"))
	if len(entries) != 0 {
		t.Errorf("a broken download left %v", entries)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestOSPrettyName(t *testing.T) {
	h, _ := newHost(t, nil)
	put(t, h, "/etc/os-release", "NAME=\"SL Micro\"\nPRETTY_NAME=\"Harvester v1.7.1\"\nID=harvester\n")
	if got, err := h.OSPrettyName(t.Context()); err != nil || got != "Harvester v1.7.1" {
		t.Errorf("OSPrettyName = %q, %v", got, err)
	}
}

func TestRestartService(t *testing.T) {
	h, s := newHost(t, nil)
	if err := h.RestartService(t.Context(), "rancher-system-agent.service"); err != nil {
		t.Fatal(err)
	}
	want := []string{"chroot ROOT systemctl daemon-reload", "chroot ROOT systemctl restart rancher-system-agent.service"}
	if !slices.Equal(s.cmds, want) {
		t.Errorf("commands %v, want %v", s.cmds, want)
	}
}

// TestUpgradeOS runs the OS upgrade of a node that needs every repair: an
// incomplete state file, a passive image, an old glibc, an old sftp path
// and an unpinned NIC.
func TestUpgradeOS(t *testing.T) {
	notMounted := answer{err: errors.New("exit status 32")}
	h, s := newHost(t, map[string]answer{
		"chroot ROOT mountpoint -q /tmp/upgrade-rootfs":                              notMounted,
		"chroot ROOT blkid -L COS_STATE":                                             {out: "/dev/sda4\n"},
		"chroot ROOT /tmp/elemental version":                                         {out: "/tmp/elemental: /lib64/libc.so.6: version `GLIBC_2.38' not found\n"},
		"chroot ROOT grub2-editenv /oem/grubenv list":                                {out: "saved_entry=active\nthird_party_kernel_args=console=ttyS0\n"},
		"chroot ROOT mountpoint -q /run/cos/state":                                   notMounted,
		"chroot ROOT grub2-editenv /oem/grubenv create":                              {},
		"chroot ROOT fallocate --dig-holes /run/initramfs/cos-state/cOS/passive.img": {},
	})
	elemental := filepath.Join(t.TempDir(), "elemental")
	if err := os.WriteFile(elemental, []byte("#!elemental"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.Elemental = elemental
	put(t, h, "/usr/local/upgrade_tmp/rootfs.squashfs", "hsqs")
	put(t, h, "/run/initramfs/cos-state/state.yaml", "state:\n  fs: ext4\n")
	put(t, h, "/run/initramfs/cos-state/cOS/passive.img", "img")
	put(t, h, "/oem/harvester.config", "os:\n  externalstorage:\n    enabled: false\n")
	put(t, h, "/etc/ssh/sshd_config.d/sftp.conf", "Subsystem sftp /usr/lib/ssh/sftp-server\n")
	put(t, h, "/sys/class/net/eno1/address", "0c:c4:7a:00:00:01\n")
	put(t, h, "/sys/class/net/lo/address", "00:00:00:00:00:00\n")

	if err := h.UpgradeOS(t.Context(), "/usr/local/upgrade_tmp/rootfs.squashfs"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"chroot ROOT mountpoint -q /tmp/upgrade-rootfs",
		"chroot ROOT mount -t squashfs -o loop,ro /usr/local/upgrade_tmp/rootfs.squashfs /tmp/upgrade-rootfs",
		"chroot ROOT mount -o remount,rw /run/initramfs/cos-state",
		"chroot ROOT mount -o remount,ro /run/initramfs/cos-state",
		"chroot ROOT mount -o remount,rw /run/initramfs/cos-state",
		"chroot ROOT fallocate --dig-holes /run/initramfs/cos-state/cOS/passive.img",
		"chroot ROOT mount -o remount,ro /run/initramfs/cos-state",
		"chroot ROOT blkid -L COS_STATE",
		"chroot ROOT /tmp/elemental version",
		"mount -o bind /lib64 ROOT/lib64",
		"mount -o bind /lib ROOT/lib",
		"chroot ROOT /tmp/elemental upgrade --logfile /usr/local/upgrade_tmp/elemental-upgrade-20260304050607.log --directory /tmp/upgrade-rootfs --config-dir /tmp/upgrade-elemental --debug",
		"umount ROOT/lib",
		"umount ROOT/lib64",
		"chroot ROOT grub2-editenv /oem/grubenv create",
		"chroot ROOT grub2-editenv /oem/grubenv list",
		"chroot ROOT grub2-editenv /oem/grubenv set third_party_kernel_args=console=ttyS0 multipath=off",
		"chroot ROOT grub2-editenv /oem/grubenv list",
		"chroot ROOT grub2-editenv /oem/grubenv set third_party_kernel_args=console=ttyS0 ifname=eno1:0c:c4:7a:00:00:01",
		"chroot ROOT umount /tmp/upgrade-rootfs",
	}
	if !slices.Equal(s.cmds, want) {
		t.Errorf("commands\n%s\nwant\n%s", strings.Join(s.cmds, "\n"), strings.Join(want, "\n"))
	}
	for path, want := range map[string]string{
		"/tmp/upgrade-elemental/config.yaml":      "size: 3072",
		"/tmp/elemental":                          "#!elemental",
		"/run/initramfs/cos-state/state.yaml.bak": "fs: ext4",
		"/etc/ssh/sshd_config.d/sftp.conf":        "/usr/libexec/ssh/sftp-server",
		"/oem/99_disable_lh_multipathd.yaml":      "VIRTUAL-DISK",
		"/oem/grubcustom":                         "",
	} {
		if got := read(t, h, path); !strings.Contains(got, want) {
			t.Errorf("%s = %q, want it to contain %q", path, got, want)
		}
	}
	for _, gone := range []string{"/usr/local/upgrade_tmp/rootfs.squashfs", "/run/initramfs/cos-state/state.yaml"} {
		if ok, _ := h.FileExists(t.Context(), gone); ok {
			t.Errorf("%s is still there", gone)
		}
	}
}

func TestUpgradeOSFailureNamesTheLog(t *testing.T) {
	h, _ := newHost(t, map[string]answer{
		"chroot ROOT mountpoint -q /tmp/upgrade-rootfs": {err: errors.New("exit status 32")},
		"chroot ROOT blkid -L COS_STATE":                {out: "/dev/sda4"},
		"chroot ROOT /tmp/elemental upgrade --logfile /usr/local/upgrade_tmp/elemental-upgrade-20260304050607.log --directory /tmp/upgrade-rootfs --config-dir /tmp/upgrade-elemental --debug": {
			err: errors.New("exit status 1: no space left on device")},
	})
	elemental := filepath.Join(t.TempDir(), "elemental")
	_ = os.WriteFile(elemental, []byte("x"), 0o755)
	h.Elemental = elemental
	err := h.UpgradeOS(t.Context(), "/usr/local/upgrade_tmp/rootfs.squashfs")
	if err == nil || !strings.Contains(err.Error(), "elemental-upgrade-20260304050607.log") || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("err = %v, want the cause and the log file", err)
	}
}

func TestRebootAfterJob(t *testing.T) {
	h, s := newHost(t, nil)
	job := host.JobContainer{Namespace: "harvester-system", Pod: "p-post-drain-n1-abcde", Container: "apply"}
	if err := h.RebootAfterJob(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	want := []string{"chroot ROOT systemctl daemon-reload", "chroot ROOT systemctl start upgrade-reboot.service"}
	if !slices.Equal(s.cmds, want) {
		t.Errorf("commands %v, want %v", s.cmds, want)
	}
	script := read(t, h, "/tmp/upgrade-reboot.sh")
	for _, part := range []string{"--namespace harvester-system --name '^p-post-drain-n1-abcde$'", "--name '^apply$'", `"CONTAINER_EXITED 0"`,
		"rm -f /var/lib/rancher/rke2/agent/pod-manifests/*", "reboot"} {
		if !strings.Contains(script, part) {
			t.Errorf("the reboot script lacks %q:\n%s", part, script)
		}
	}
	if unit := read(t, h, "/run/systemd/system/upgrade-reboot.service"); !strings.Contains(unit, "ExecStart=/bin/sh /tmp/upgrade-reboot.sh") || !strings.Contains(unit, "Restart=always") {
		t.Errorf("unit:\n%s", unit)
	}
}
