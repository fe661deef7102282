// Package preflight holds the checks that must pass before an upgrade
// disrupts anything, as pure verdict functions over facts gathered from the
// cluster, plus the gatherers. The admission checks (admission*.go) judge an
// UpgradePlan when it is created, updated or deleted; the webhook gathers the
// facts and calls them. The Initialize phase checks the nodes' disk space
// (disk.go) and the API server's certificates (certs.go).
package preflight
