// Package preflight holds the checks that must pass before an upgrade
// disrupts anything: each check is a pure verdict over gathered facts, and
// the gatherers that collect those facts live next to them.
package preflight
