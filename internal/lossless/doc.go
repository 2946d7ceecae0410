// Package lossless holds the tests that prove docs/ownership.md: that an
// acknowledged reservation is honoured across every flip and kill switch,
// that a released one is never claimed, and that the two stores end up
// agreeing.
//
//   - TestModel is the randomized model test. The world is real: MariaDB
//     and Redis, two pods, three replicas per pod (each with its own stores,
//     mirror, relay, reaper and facade) whose flags each see every flip at
//     their own random delay of 0-200 ms. 32 callers reserve, read back
//     (GET), claim, release and abandon carts of small stock, retrying
//     calls whose outcome is unknown, while lost replies are injected
//     between the facades and the stores and the flags walk through every
//     mode and kill switch variant and back. Some carts start as the flags
//     flip, some reads wait for a flip, and each pod has a quiet shop whose
//     fence lags its flags. At the end every answer is checked with the
//     porcupine model (package history), every GET and claim of an
//     acknowledged reservation against its acknowledgement (the reads
//     check, history.CheckReads: a live hold reads as exactly the
//     acknowledged hold, a claimed one as claimed, never not found; a
//     claim carries the acknowledged allocations), the ledger against the
//     acknowledged claims and each claims row against its acknowledged
//     reserve, the stores for holds left after expiry, and reconcile for
//     drift. Runs are seeded: a failing run prints its seed, and
//     RESERVOIR_MODEL_SEED replays the same schedule.
//     RESERVOIR_MODEL_DURATION sets how long the traffic runs (default
//     60s; CI runs the default).
//   - TestModelCatchesAnUndeliveredFeed runs the same world with MySQL's
//     change feed never reaching Redis (mirror.Config.Disabled) and must
//     find a violation: the checks can fail.
//   - TestReadsCheckCatchesStaleReads reads through a deliberately broken
//     GET (the one the facade had before issue 24: the store the flags
//     name, without the fence) while the replicas' flags disagree, and the
//     reads check must report each wrong read; the same GETs through the
//     facade must pass. It also shows the ledger check catching a claims
//     row at another location than its reserve held.
//   - The Test<Case> functions are the cases an adversarial run found, one
//     deterministic call sequence each.
//
// The package has no code outside its tests.
package lossless
