// Package faulttest holds reservoir's fault matrix: for each mode, each
// network fault (package faults) and each server (MySQL, Redis), concurrent
// checkout traffic runs through the dual-write facade of one pod whose
// stores and mirror reach their servers through an in-process toxiproxy;
// the fault is injected on one proxy for the middle of the traffic and
// healed; every hold expires and is reaped; and the guarantees of
// docs/ownership.md are checked. A control cell per mode runs the same
// traffic without a fault.
//
// Process cells do to a real server process what a proxy can only imitate.
// The faulted server is the cell's own (package testproc: a private
// MariaDB or Redis started by scripts/services, the Redis with its
// append-only file), reached directly, without a proxy; the other server
// is the shared one, behind its proxy. Same traffic, same checks:
//   - kill: SIGKILL at the window's start; at its end the server is
//     started again on the same port and data, and the window closes once
//     it answers (MariaDB's crash recovery, Redis's append-only file
//     loaded; about a second later than the other faults' heal). Every
//     connection is gone and nothing the server acknowledged may be.
//   - pause: SIGSTOP, then SIGCONT at the window's end. The kernel still
//     accepts connections (a MySQL dial connects and waits for a
//     handshake), so only the callers' deadlines end their calls; what
//     they sent runs when the server runs again, those they gave up on
//     included. With the CI phases the pause (1.1s) is shorter than a
//     call's deadline (2s): callers see a stall (the relay's calls may
//     time out, or wait it out too); with -long they time out and retry.
//     A pause is not a total fault (see fault.total): the comparer need
//     not see a shadow fault where the relay waited it out.
//
// They run in the redis and mysql columns, each process fault on each
// server: cells named column/server/fault, e.g. mysql/mysql/kill (the
// decider killed) and mysql/redis/kill (the follower killed).
//
// The columns (modes):
//   - redis, shadow: Redis decides the shop throughout (shadow also asks
//     MySQL, for comparison); MySQL's ledger takes the claims.
//   - mysql: the first call hands the shop to MySQL, which decides from
//     then on; Redis follows through MySQL's change feed (the relay) and
//     is asked for comparison. The fault starts once that handoff is
//     done (both fences name MySQL), later than planned only where a
//     loaded machine made the handoff outlast it; the window keeps its
//     length.
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
//   - A process cell needs mariadbd or redis-server installed (testproc
//     skips it otherwise, saying so; scripts/services installs them), and
//     makes one MariaDB data directory per test binary, copied per cell.
//   - -long, or RESERVOIR_FAULT_LONG=1, gives each cell a 30s traffic
//     phase with a 15s fault (about 12 minutes for the matrix) instead of
//     the CI phases (2s, 1.1s; under 2 minutes for the package).
//   - A cell logs one report: carts and calls, errors by operation and
//     kind, the comparer's classes, the late claims, the history check,
//     the drift found before and after repair and the fences; the matrix
//     summary comes last.
//   - Failing histories are written as porcupine's HTML visualization and
//     as JSON under $RESERVOIR_ARTIFACTS/<test name>/ (a temporary
//     directory when unset); the failure message names the files.
package faulttest
