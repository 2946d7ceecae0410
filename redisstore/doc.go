// Package redisstore is the legacy Redis reservation store. For each shop
// it either decides (places, refuses, claims, releases and expires holds,
// as the platform always did) or follows what MySQL decides, as the
// shop's fence says; the rule book is docs/ownership.md.
//
// It owns the Redis keys of reservations (keys.go has the layout), the Lua
// scripts that change them (scripts.go), the reaper, the Redis side of the
// handoffs and of following MySQL (follow.go: Fence, Yield, Force,
// Snapshot, Apply, Rewrite; copy.go: the copy ahead) and Drift. It must never change the ledger except through
// reservation.Ledger (Deduct in an authority Claim, AdjustStock in
// Adjust), never decide for a shop whose fence names MySQL, never write
// anything in a shadow call, never decide which store should decide (the
// facade's and the mirror's job), and never touch another shop's keys in
// a script.
//
// # Model
//
// A quantity per shop x item x location is what the legacy platform's
// DECRBY and INCRBY act on: the ledger's available stock minus what is
// held. A hold records a token's allocations, expiry and authority; a
// sorted set per shop indexes holds by expiry for the reaper. Every key of
// a shop carries the hash tag {shop:<id>}, so on a Redis Cluster a shop's
// keys share one slot and a script can change several atomically. Expiry
// is judged by the Redis server's clock.
//
// # One decider: the fence
//
// Each shop's fence key names its decider and the epoch since which it
// does; no key means Redis, epoch 0. Every deciding script (reserve,
// release, claim_check, reap) reads the fence in the same atomic step as
// its decision, and for a shop MySQL decides changes nothing and answers
// *reservation.NotDeciderError. A handoff to MySQL starts with Yield,
// which sets the fence in a script too: a deciding script is wholly
// before it or wholly after it. Yield, Force and a fence change of the
// feed only ever raise the epoch, so a stale or repeated handoff changes
// nothing.
//
// # Tombstones
//
// A reservation that reaches a terminal state (claimed, released,
// expired, or a reserve refused) leaves a tombstone for TombstoneTTL,
// longer than any hold lives: its state, what it held or deducted, the
// hold's expiry, and a refusal's short lines. Every call on the token
// answers from it (a claimed token cannot be reserved or released, a
// released one cannot be claimed, a refused reserve is refused again),
// and no late write, mirrored or retried, brings the reservation back. A
// sorted set per shop lists the tombstones so a snapshot can copy them.
//
// # Writes are never applied twice
//
// A reply can be lost after the server ran the script: a cut connection, a
// read timeout. go-redis would then resend the command (three times by
// default), and a DECRBY resent is a unit lost. So the client must not
// resend (Config.Client, NewClient), and every write script is keyed: run
// again, Reserve finds its hold or tombstone, Release finds none, a
// claim's cleanup finds its tombstone, an adjust finds the marker of its
// change id. A caller that gets an error from a write may therefore
// repeat the same call: the state moves once.
//
// # The legacy claim
//
// Claim as authority touches two systems that cannot change together: the
// MySQL ledger and the Redis hold. A script first marks the hold
// claiming, then the ledger is deducted (Ledger.Deduct, exactly once per
// token thanks to its claims row; it also checks MySQL's fence, so a
// claim cannot slip past a handoff). Once the ledger is deducted the claim
// has happened and the answer is success. The deduction is in MySQL's
// change feed, and Apply makes Redis follow it: the hold goes, the
// claimed tombstone stays, the deduction leaves the quantities. That last
// step is not on the caller's path (unless Config.InlineClaimCleanup, or
// no Source); until it is done, a call that finds the claiming hold asks
// the ledger first and answers as claimed. While a claim the ledger has
// not recorded marks a hold, a release answers
// reservation.ErrClaimInProgress (the outcome is not known yet) and the
// reaper leaves it alone; after ClaimGrace both ask the ledger
// (Config.Source) whether the claim happened. The windows where the two systems disagree are counted in
// reservoir_redis_legacy_claim_failures_total (see ClaimWindow).
//
// # Shadow calls
//
// While MySQL decides, the facade still asks Redis what it would have
// answered, for comparison. Reserve, Claim and Release as shadow run the
// deciding scripts in a read-only mode, with EVALSHA_RO so the server
// refuses a write: they answer from Redis's holds, tombstones and
// quantities and change nothing. Redis follows MySQL only through the
// change feed.
//
// # Following MySQL
//
// While MySQL decides, Redis holds a copy of everything it decided, so a
// kill switch loses nothing. Apply applies MySQL's change feed: a
// reservation's current state (a hold created, a terminal state turned
// into a tombstone, a claim's deduction taken out), a ledger adjust once
// per change id, a fence. Every change is idempotent and a token's
// changes may arrive in any order. Snapshot reads a shop's fence, holds
// and tombstones for a handoff to MySQL; Rewrite makes a shop exactly a
// snapshot of MySQL's, quantities from the ledger, when Redis lost its
// data. Drift compares a shop with the ledger and the decider's holds.
//
// # Metrics
//
// All in the reservoir_redis_ namespace, none labelled by shop:
//
//   - script_seconds{script}, script_errors_total{script}: every script
//     call; an error means the script may have run.
//   - tombstones_written_total{state}: reservations that reached a
//     terminal state here.
//   - tombstone_hits_total{op,state}: calls answered from a tombstone.
//   - not_decider_total{op}: deciding calls refused by the fence.
//   - legacy_claim_failures_total{window}: the legacy claim's windows.
//   - claim_in_progress_total: releases refused while a claim is under
//     way.
//   - mirror_applies_total{kind,result}: change-feed changes applied
//     (the name predates follow.go; dashboards keep it).
//   - adjust_follow_failures_total: adjusts whose Redis step failed after
//     the ledger changed.
//   - reaped_holds_total, reaped_units_total: what the reaper gave back.
//   - reap_settled_total: claiming holds the reaper settled as claimed.
//
// # Servers
//
// Needs Redis 7.0 or later (shadow calls and reads run read-only scripts,
// EVALSHA_RO). Works on a standalone Redis and on a Redis Cluster. The set of shops the
// reaper walks lives in its own slot, so it is never in a script with shop
// keys. A cluster client built with NewClient follows MOVED and ASK
// redirects but never resends a script after a network error (see
// NewClient): during a slot migration or a failover, scripts find the
// slot's new node.
package redisstore
