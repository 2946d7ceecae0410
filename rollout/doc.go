// Package rollout moves shops between the stores stage by stage: the
// plan and its gates, the controller that advances, kills and releases
// (with the audit of every change), the handoff checks that keep a move
// lossless, and the replicas' heartbeats that say a change was obeyed.
//
// The pieces it drives live in packages of their own, each with one
// concern: rollout/authority (modes, kill switch, decisions: what the
// facade imports), rollout/flagdoc (the flags document, its rendering,
// parsing and stores), and rollout/flagsource (the sources a replica
// evaluates the flags through: a file, the control database, a flagd
// daemon or any OpenFeature provider).
//
// The control database's statements (state, audit, heartbeats, the flags
// row) live in internal/controldb; rollout and its packages hold no SQL.
package rollout
