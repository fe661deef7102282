// Package cluster is the only place that knows the foreign kinds the toolkit
// works with (Harvester, Rancher, Cluster API, system-upgrade-controller,
// KubeVirt, Longhorn): their groups and versions, the well-known objects and
// namespaces, the annotations and labels other components read or write, and
// builders for the objects the toolkit creates. The rest of the code speaks in
// its own terms and calls into this package.
package cluster
