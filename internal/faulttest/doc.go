// Package faulttest holds reservoir's fault matrix: for each mode, each
// network fault (package faults) and each server (MySQL, Redis), concurrent
// checkout traffic runs through the dual-write facade of one pod whose
// stores and mirror reach their servers through an in-process toxiproxy;
// the fault is injected on one proxy for the middle of the traffic and
// healed; every hold expires and is reaped; and the guarantees of
// docs/ownership.md are checked. A control cell per mode runs the same
// traffic without a fault.
//
// The columns (modes):
//   - redis, shadow: Redis decides the shop throughout (shadow also asks
//     MySQL, for comparison); MySQL's ledger takes the claims.
//   - mysql: the first call hands the shop to MySQL, which decides from
//     then on; Redis follows through MySQL's change feed (the relay) and
//     is asked for comparison.
//   - kill: as mysql, then the kill switch is engaged inside the fault
//     window: the next call hands the shop back to Redis, MySQL's feed
//     drained into it first, under the fault.
//
// What each cell checks:
//   - Callers: only retryable errors (a timeout, a cut connection,
//     contention, dualwrite.ErrDeciderUnreachable), and only where the
//     faulted server takes part in the answer: a server that only follows
//     (Redis while MySQL decides, MySQL's shadow where Redis decides)
//     changes no answer. After healing, every call is answered.
//   - No acknowledged reservation is lost, across the kill switch too:
//     every one a caller claims is claimed (once; a repeated claim is a
//     replay), none answers not_found, expired or insufficient stock.
//   - Claims after an acknowledged release never succeed, and late claims
//     are answered from tombstones: once every hold expired, a sample of
//     each kind of cart is claimed again, and a claimed cart answers its
//     claim replayed, a released one 409 released, an abandoned one 410
//     expired, never 404; only a refused one (it never held anything)
//     answers 404 not_found.
//   - The ledger: one claim row per claim a caller was told about, with
//     its allocations, none for a released or abandoned cart, and each
//     ledger row down by exactly its claim rows (no oversell).
//   - The stores: no hold left after expiry in either (where MySQL
//     decides, the relay brings its expiries to Redis and the feed ends
//     empty); the fences name the column's decider in both stores;
//     reconciliation finds no drift at all (Redis holds what the decider
//     holds, the pools respect the ledger), and none after a repair.
//   - The history: every call, against the model of the deciding store
//     (package history, porcupine), each call recorded once from its
//     first attempt to its answer.
//
// Every bug the suite found is kept as a named regression case
// (regressions_test.go), adapted to the current design: each names the
// protection that now covers it (the change feed and the drain,
// tombstones, fences, the asynchronous shadow), and where a test can
// switch that protection off (the mirror's Disabled knob keeps the feed
// from Redis) the case is run without it too and shown to fail.
// selfcheck_test.go shows the matrix's own checks failing on a broken pod
// (a store that deducts a repeated claim twice, a kill switch without the
// drain).
//
// The package has no code outside its tests: it is a test suite, kept
// apart so that it runs on its own (`go test ./internal/faulttest`).
//
// Running it:
//   - The servers come from scripts/services, as for every integration
//     test; MySQL must be reached over TCP so the proxy is not bypassed.
//   - Cells run 8 at a time unless -parallel is given: they mostly wait.
//   - -long, or RESERVOIR_FAULT_LONG=1, gives each cell a 30s traffic
//     phase with a 15s fault (about 12 minutes for the matrix) instead of
//     the CI phases (2s, 1.1s; about 1.5 minutes for the package).
//   - A cell logs one report: carts and calls, errors by operation and
//     kind, the comparer's classes, the late claims, the history check,
//     the drift found before and after repair and the fences; the matrix
//     summary comes last.
//   - Failing histories are written as porcupine's HTML visualization and
//     as JSON under $RESERVOIR_ARTIFACTS/<test name>/ (a temporary
//     directory when unset); the failure message names the files.
package faulttest
