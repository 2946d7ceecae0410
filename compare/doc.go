// Package compare judges the dual-written calls of the migration: each call
// the facade makes on both stores yields an Observation (both outcomes,
// allocations, errors and latencies, with the mode, pod, shop and
// operation), and the Comparer classifies it (Classify), counts it in
// Prometheus, keeps sampled diff records of the ones that differ, and
// accumulates per-pod stats that the rollout gates read (Totals).
//
// # What it owns
//
//   - The classification rules (Classify, Rules) and the classes.
//   - The metrics reservoir_compare_* on the registry it is given.
//   - The tables compare_diffs and compare_stats (migration 00002): diff
//     records written at a capped rate (a token bucket per class) by one
//     background writer from a bounded queue, and stats increments flushed
//     every FlushInterval and summed across replicas by the database.
//   - The table compare_traffic (migration 00008): every call a facade
//     took, per pod, window, mode and operation, compared or not (Served,
//     Traffic), flushed with the stats: which pods are busy, in every mode.
//   - Retention of these tables.
//
// Their statements live in internal/controldb with every other statement
// against the control database; this package holds no SQL.
//
// # What it must never do
//
// It never calls a store and never changes an answer: it sees outcomes after
// the facade has them. Observe never blocks its caller on I/O: it classifies,
// bumps counters, takes a token and hands a record to a bounded queue, or
// drops and counts it. A slow or unreachable database costs diff records and,
// past MaxPendingStats keys, stats, never caller latency. A shop id is never
// a metric label.
//
// # Calibration
//
// Following Twitter's Diffy, the facade can run one store as both authority
// and shadow, with the mode set to ModeCalibration (or "calibration_<store>").
// Those observations are classified and counted like any other, under their
// own mode, so the rate of each class in calibration is the noise floor:
// what races and clocks produce when nothing differs. Totals keeps modes
// apart; Summary.Excess subtracts the calibration rate from the live rate.
//
// # Time
//
// Stats windows and diff records are keyed by the observation's At (the
// call's start, from the facade's clock); retention and the token buckets use
// the comparer's clock. The database stores UTC: open it with
// mysqlstore.Open.
package compare
