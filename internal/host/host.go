// Package host is what the node jobs do on the node itself rather than
// through the Kubernetes API: containerd's images, files of the host's
// configuration, systemd services, the OS upgrade and the reboot. Host is
// the one interface for all of it; Chroot runs the host's own tools through
// the host's root file system mounted in the job's container, and the
// hosttest package records what a job asked for, for tests and the
// simulator.
package host

import (
	"context"
	"io"
	"io/fs"
)

// Host acts on one node. Paths are absolute paths on the host. Every
// method can be repeated: a job restarted after a crash calls them again.
type Host interface {
	// Images returns the references of the images in containerd's k8s.io
	// namespace (the kubelet's), without image IDs.
	Images(ctx context.Context) ([]string, error)
	// ImportImages imports a zstd-compressed image archive (name is for
	// messages) into containerd's k8s.io namespace.
	ImportImages(ctx context.Context, name string, archive io.Reader) error
	// RemoveImage removes an image from the kubelet's runtime (crictl rmi).
	RemoveImage(ctx context.Context, ref string) error

	// FileExists reports whether a file or directory exists.
	FileExists(ctx context.Context, path string) (bool, error)
	// WriteFile writes a file, creating its directory; the file appears
	// whole or not at all.
	WriteFile(ctx context.Context, path string, content io.Reader, perm fs.FileMode) error
	// Remove removes a file or a directory tree; a missing one is fine.
	Remove(ctx context.Context, path string) error

	// RestartService reloads systemd's units and restarts a service.
	RestartService(ctx context.Context, unit string) error
	// OSPrettyName is PRETTY_NAME of the running OS (/etc/os-release), e.g.
	// "Harvester v1.7.1".
	OSPrettyName(ctx context.Context) (string, error)
	// CPUCount is the number of CPUs the node's workloads can use.
	CPUCount(ctx context.Context) (int, error)

	// UpgradeOS installs the OS image in the squashfs file at rootfs as the
	// next boot's system (elemental upgrade), and removes the file.
	UpgradeOS(ctx context.Context, rootfs string) error
	// RebootAfterJob makes the node reboot once the job's container has
	// exited successfully, so that the Job completes first.
	RebootAfterJob(ctx context.Context, job JobContainer) error
}

// JobContainer names the container of a job's pod.
type JobContainer struct {
	Namespace, Pod, Container string
}

func (c JobContainer) String() string { return c.Namespace + "/" + c.Pod + "/" + c.Container }
