// Package bench is reservoir's load benchmark: the reservation stores and the
// dual-write facade side by side, against the real servers, with a network
// between them.
//
// A run is a list of points. A point drives one scenario (the shape of the
// load: which items, what carts, whether the stock runs out) against one
// variant (the thing under test: the Redis store, the MySQL unit pool, a
// single-row or a bucketed MySQL baseline, the facade in one mode) with a
// number of closed-loop callers and an added network round trip. Per point it
// measures throughput, latency percentiles, errors by kind, deadlocks,
// retries, refills, fsyncs per operation, server and load generator CPU,
// round trips and connection-seconds per operation (by caller, Little's law's
// W), and it checks the invariants (no unit lost or invented) afterwards.
// A run of several rounds measures every point once per round, alternating
// the order of the variants compared, and judges pairs of variants (a
// variant over its baseline, round by round) by the median ratio and its
// bootstrap interval.
//
// The added latency is a real TCP proxy (Shopify's toxiproxy, in process)
// between the load generator and each server, with a latency toxic on the
// server-to-client direction: every round trip pays it once.
//
// A run owns what it creates and removes it: one database (the stores'
// migrated schema plus the baselines' tables) and one Redis key prefix; it
// sets innodb_flush_log_at_trx_commit and a lock counter monitor for its
// duration when asked, and puts them back. It never touches another
// database or prefix. The baselines' tables live only in that database: they
// are measuring sticks, not product code.
package bench
