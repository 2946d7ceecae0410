// Package wire holds every JSON body that leaves reservoir's process: the
// checkout API's requests and answers, the admin API's (and so what the
// dashboard reads), the error body, /healthz and /readyz, and the CLI's
// --json outputs (every rollout action but auto, reconcile, version; see
// cli.go). One type
// per body, documented once, here; the server and the CLI encode these
// types and nothing else.
//
// Conventions, which every type follows (wire_test.go enforces the first
// four on every field):
//
//   - Keys are snake_case, from a json tag on every field. A Go field name
//     ("Name", "MinObservations") never reaches the wire.
//   - A time is RFC 3339 in UTC. A time that is not known (a kill switch
//     never engaged, a stage never applied) is left out: every time.Time
//     field is tagged omitzero, so "0001-01-01T00:00:00Z" is never written.
//   - A duration is a number whose key ends in its unit: _ns for an
//     integer number of nanoseconds (min_duration_ns, took_ns,
//     seen_ago_ns), _ms for a fractional number of milliseconds
//     (obeyed_after_ms, oldest_ms, p99_ms). No field is a time.Duration.
//   - A field's type is a basic type, time.Time or a type of this package:
//     no domain type is encoded as it is, so a change to one can never
//     change the wire by accident.
//   - A rate is a fraction: 0.001 is 0.1%.
//   - A list is [] when empty, never null, unless its field says it is
//     left out when empty; a map is {} when empty.
//   - Enumerations are the strings the flags and the plan use: modes
//     (redis, shadow, mysql, mysql_only), kill switch states (off, redis,
//     redis_only), stores (redis, mysql), gate names
//     (max_rate:shadow_missing), compare classes (outcome_mismatch).
//
// The conversions from the domain types (rollout.Status, compare.Totals,
// reconcile.Report, ...) are here too, one per kind, so the server and the
// CLI say the same thing the same way. Package wire imports the domain
// packages whose values it encodes; no domain package may import it.
package wire
