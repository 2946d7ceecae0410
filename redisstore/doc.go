// Package redisstore is the legacy Redis reservation store, kept as good as
// Redis allows and honest about what it cannot do. It is the source of
// truth until MySQL has proven itself, and where the kill switch lands
// afterwards.
//
// It owns the Redis keys of reservations (see keys.go for the layout), the
// Lua scripts that change them (scripts.go), the reaper, and Drift and
// Resync, which compare Redis with the MySQL ledger and rebuild it. It must
// never change the ledger except through reservation.Ledger (Deduct in an
// authority Claim, AdjustStock in an authority Adjust), never decide
// authority or compare stores (the facade's job), and never touch another
// shop's keys in a script.
//
// # Model
//
// A quantity per shop x item x location is what the legacy platform's
// DECRBY and INCRBY act on: the ledger's available stock minus what is
// held. A hold records a token's allocations, expiry and authority; a
// sorted set per shop indexes holds by expiry for the reaper. Every key
// of a shop carries the hash tag {shop:<id>}, so on a Redis Cluster a
// shop's keys share one slot and a script can change several atomically.
//
// Reserve, Release, the claim's cleanup, settle, adjust and the reaper are
// Lua scripts, each atomic: a cart is held whole or not at all, with the
// same location rule as mysqlstore (see package reservation), and the
// reaper returns each expired hold once however many reapers run. Expiry is
// judged by the Redis server's clock.
//
// # Writes are never applied twice
//
// A reply can be lost after the server ran the script: a cut connection, a
// read timeout. go-redis would then resend the command (three times by
// default), and a DECRBY resent is a unit lost. So the client must not
// resend (Config.Client, NewClient), and every write script is keyed by
// its token: run again, Reserve finds its hold and answers Replayed,
// Release finds no hold, a claim finds its marker. An adjust has no token,
// so its script records a random id per call. A caller that gets an error
// from a write may therefore repeat the same call: the state moves once.
//
// # The legacy claim and its failure windows
//
// Claim as authority touches two systems that cannot change together: the
// MySQL ledger and the Redis hold. The store deducts the ledger first
// (Ledger.Deduct, exactly once per token thanks to its claims row), then
// runs a script that removes the hold and sets a claimed marker, without
// giving the units back: the ledger went down by the same amount. The other
// order (remove the hold, then deduct) would turn a failure in between into
// a sale the ledger never records, an oversell nobody sees; this order
// turns it into a hold left over, which is visible and repairable. Each
// window is counted in reservoir_redis_legacy_claim_failures_total:
//
//   - deduct_error: Deduct failed with something other than a refusal
//     (timeout, lost connection). The ledger may or may not have been
//     deducted; the hold is untouched. Retrying the claim is safe: a
//     deduction that did commit answers Applied false and is not repeated.
//     If nobody retries and the deduction did commit, the hold becomes a
//     leftover (below).
//   - after_deduct_before_cleanup: the ledger was deducted, the cleanup
//     failed (the caller gets a *PartialClaimError). The hold stays: its
//     units are held for nobody (an undersell) until it expires. Then the
//     reaper, which asks the ledger (Config.Source) which expired tokens
//     it deducted, settles it as claimed rather than giving back units the
//     ledger no longer has (counted in reservoir_redis_reap_settled_total;
//     a store without a Source gives them back: an oversell risk). Retrying
//     the claim completes it without a second deduction. Drift reports the hold as DriftLeftoverHold; Resync
//     removes it. A process that dies inside this window is not counted
//     (it cannot be): Drift is how it is found.
//   - hold_gone_before_cleanup: the ledger was deducted, and by the
//     cleanup the hold had been released or reaped, so its units went back
//     to a Redis quantity the ledger no longer backs. The cleanup takes the
//     deduction out again and the claim succeeds; the count shows how often
//     a claim raced a release or an expiry.
//
// A Resync that runs between a deduction and its cleanup, after the hold
// was already reaped, can make that cleanup take the deduction out a
// second time (Redis then undersells until the next Resync); Drift shows it.
//
// Claim as shadow (settle) removes the Redis hold, gives its units back and
// takes out what the authority deducted: Redis follows the ledger without
// touching it. A settle that never arrives (Redis unreachable at that
// moment) is the same leftover hold, settled by the reaper the same way.
//
// # Following the ledger's claims
//
// A claim's Redis half can be lost when Redis never held the cart at all
// (its shadow reserve failed too): no hold is left for the reaper to find,
// and the deduction never reaches Redis's quantities. FollowClaims reads the
// ledger's recent claims (Config.Source) and settles every one without a
// claimed marker here; the cell runs it on every reaper tick. Together the
// reaper and the follower keep Redis's quantities at the ledger's after any
// lost write, which is what keeps the kill switch lossless between
// reconciles.
//
// # Drift and Resync
//
// Drift compares one shop's Redis state with the ledger, the ledger's
// claims and, when MySQL is the authority, MySQL's holds. Resync rebuilds a
// shop's quantities, holds and claimed markers from the same sources. Both
// need Config.Source (mysqlstore.Store implements it).
//
// # Cluster
//
// Works on a standalone Redis and on a Redis Cluster. The set of shops the
// reaper walks lives in its own slot, so it is never in a script with shop
// keys. A cluster client built with NewClient does not follow MOVED or ASK
// redirects (see NewClient): during a slot migration, calls fail and the
// caller's retry goes to the right node.
package redisstore
