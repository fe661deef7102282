// Package preflight holds the checks made before and while an upgrade
// starts, as pure verdict functions over facts gathered from the cluster,
// plus the gatherers. The admission checks (admission*.go) judge an
// UpgradePlan when it is created, updated or deleted; the webhook gathers the
// facts and calls them.
package preflight
