// Package repo is the upgrade repo: an HTTP server that serves the files
// inside the release ISO (the CDI disk.img on the ISO's PVC) read-only under
// /harvester-iso/, reading the image directly without a mount or
// privileges, and the Deployment and Service that run it for a plan.
//
// The server answers:
//
//   - GET and HEAD /harvester-iso/<path>: the file, with Range (single and
//     multiple ranges), ETag, Last-Modified and conditional requests handled
//     by net/http's ServeContent. A directory is listed (HTML) at its path
//     with a trailing slash; without it the client is redirected there.
//   - /healthz: 200 while the process runs (liveness).
//   - /readyz: 200 "ready" once the ISO is open and, when a checksum was
//     given, verified; otherwise 503 with "opening", "verifying: …" or the
//     failure message (readiness).
//
// Paths with ".", "..", empty segments, backslashes or NUL get 400; methods
// other than GET and HEAD get 405 with Allow. Until the ISO is ready,
// content requests get 503 with the reason.
//
// A repo that cannot serve the ISO (not an ISO, truncated, or a checksum
// mismatch) writes the reason to its termination message file and exits
// with ExitCodeInvalidISO or ExitCodeChecksumMismatch; TerminalFailure
// reads that back from the Pod's status for the RepoCreate phase.
package repo

import "github.com/harvester/upgrade-toolkit/internal/release"

// PathPrefix is the URL path under which the ISO's content is served.
const PathPrefix = release.RepoRoot

// Health and readiness endpoints.
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
)

// Ports: the container listens on Port; the Service exposes ServicePort.
const (
	Port        = 8080
	ServicePort = 80
	PortName    = "http"
)

// ContainerName is the name of the repo container in the Deployment's pods.
const ContainerName = "repo"

// ISOMountPath is where the ISO's PVC is mounted; CDI stores the image as
// ISOFileName in the volume.
const (
	ISOMountPath = "/iso"
	ISOFileName  = "disk.img"
)

// Exit codes of `upgrade-toolkit repo serve` for failures that restarting
// cannot fix: the plan must fail with the termination message.
const (
	// ExitCodeChecksumMismatch: the image's SHA-512 is not the expected one.
	ExitCodeChecksumMismatch = 3
	// ExitCodeInvalidISO: the image is not an ISO 9660 image or is truncated.
	ExitCodeInvalidISO = 4
)

// Failure is a terminal failure of the repo server: the ISO cannot be
// served, and restarting will not change that.
type Failure struct {
	// ExitCode is ExitCodeChecksumMismatch or ExitCodeInvalidISO.
	ExitCode int
	// Message says what is wrong and what to do; it becomes the
	// container's termination message.
	Message string
}

func (f *Failure) Error() string { return f.Message }
