// Package version holds the build information stamped in by the linker.
package version

import (
	"fmt"
	"runtime"
)

// Set at build time with -ldflags "-X ...".
var (
	// Version is the release version, e.g. v1.8.0, or "dev".
	Version = "dev"
	// GitCommit is the commit the binary was built from.
	GitCommit = "unknown"
	// GitTreeState is "clean" or "dirty".
	GitTreeState = "unknown"
)

// String is the one-line description printed by `upgrade-toolkit version`.
func String() string {
	return fmt.Sprintf("upgrade-toolkit %s (commit %s, tree %s, %s %s/%s)",
		Version, GitCommit, GitTreeState, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
