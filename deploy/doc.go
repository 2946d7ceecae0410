// Package deploy holds reservoir's deployment files: the Kubernetes
// manifests (kubernetes/), the example topology, plan and flags, the
// Grafana board and the alert rules. It has no code: its test holds the
// manifests and the repository's Dockerfile to each other and to the code
// they run (ports, probes, flags of `reservoir serve` and `migrate`,
// secrets, the non-root user), so a change on one side that the other
// does not follow fails `go test ./...` instead of a rollout. It also
// holds the admin listener reachable in an incident: the admin Service
// keeps replicas that are not ready, and the NetworkPolicy lets only
// namespaces labelled reservoir/admin-access=true reach its port.
//
// docs_test.go does the same for the repository's Markdown: no link
// leaves the repository or points to a page or heading it lacks, and
// docs/topology.md, docs/compare.md and docs/rollout.md name every
// topology key, every comparer class and the plan's default gates.
package deploy
