package wire

// The operations endpoints' bodies: /healthz and /readyz.

// Health is the answer of GET /healthz.
type Health struct {
	// Status is "ok": the process serves HTTP. Nothing else is checked.
	Status string `json:"status"`
}

// Ready is the answer of GET /readyz.
type Ready struct {
	// Ready is true when this replica can serve: it has valid flags in
	// force, no database it reaches has a schema behind this binary's
	// migrations, and the server is not shutting down. A failing store
	// does not make it unready: its pod is listed in Degraded.
	Ready bool `json:"ready"`
	// NotReady says why Ready is false, one reason per entry, in words an
	// operator can act on ("flags_not_loaded: ...", "schema_behind: ...",
	// "draining: ..."); left out when ready.
	NotReady []string `json:"not_ready,omitempty"`
	// Degraded lists what fails while the replica serves, one entry per
	// pod (or "control"), with why ("pod-b: mysql failed its ping"); left
	// out when every store answers.
	Degraded []string `json:"degraded,omitempty"`
	// Draining is true once shutdown began; left out before.
	Draining bool `json:"draining,omitempty"`
	// Stores is each pod's (and the control database's) reachability, the
	// control database first.
	Stores []StoreHealth `json:"stores"`
	// FlagsLoaded is false while this replica has no valid version of its
	// flags in force: it answers every reservation call 503
	// flags_unavailable and is not ready.
	FlagsLoaded bool `json:"flags_loaded"`
	// Schema is each database's schema against this binary's migrations,
	// the control database first, as last checked (at most 30 s ago while
	// every one is current, 2 s while one is not).
	Schema []SchemaHealth `json:"schema"`
}

// StoreHealth is the reachability of one pod's stores (or of the control
// database, as pod "control").
type StoreHealth struct {
	// Pod names the pod ("control" for the control database).
	Pod string `json:"pod"`
	// MySQL is "ok" or why the ping failed: "unreachable", "timeout",
	// "auth_failed" or "error".
	MySQL string `json:"mysql"`
	// Redis is the same for the pod's Redis; left out for the control
	// database.
	Redis string `json:"redis,omitempty"`
	// OK is true when every store answered.
	OK bool `json:"ok"`
	// MySQLBreaker is the MySQL circuit breaker: "closed" (calls go
	// through), "open" (calls answer 503 at once) or "half_open" (one
	// probe call is in flight); left out for the control database.
	MySQLBreaker string `json:"mysql_breaker,omitempty"`
	// RedisBreaker is the same for Redis; left out for the control
	// database.
	RedisBreaker string `json:"redis_breaker,omitempty"`
	// MySQLError is the driver's own error. It can name database users,
	// hosts and addresses, so only a caller with the admin token sees it;
	// left out otherwise, and when the ping succeeded.
	MySQLError string `json:"mysql_error,omitempty"`
	// RedisError is the same for Redis.
	RedisError string `json:"redis_error,omitempty"`
}

// SchemaHealth is one database's schema against the migrations embedded in
// this binary.
type SchemaHealth struct {
	// Pod names the pod ("control" for the control database).
	Pod string `json:"pod"`
	// Set is the migration set the database is checked against: "control"
	// for the control database, "pod" for a pod's.
	Set string `json:"set"`
	// State is "current", "behind" (not ready), "ahead" (ready, logged),
	// or why the version could not be read: "unreachable", "timeout",
	// "auth_failed" or "error" (as for a store's ping).
	State string `json:"state"`
	// Version is the highest migration of the set the database has
	// applied (0 when none, or when it could not be read).
	Version int64 `json:"version"`
	// Latest is the set's highest migration this binary embeds.
	Latest int64 `json:"latest"`
	// Legacy is set when the database was migrated by a release before
	// the split of the migration sets and not yet by this one: the
	// version goose_db_version records (`reservoir migrate` adopts it);
	// left out otherwise.
	Legacy int64 `json:"legacy,omitempty"`
	// Pending lists the migrations this binary needs that the database
	// has not applied; left out when none.
	Pending []int64 `json:"pending,omitempty"`
	// Unknown lists the migrations the database has applied that this
	// binary does not know; left out when none.
	Unknown []int64 `json:"unknown,omitempty"`
	// Error is the driver's error when the version could not be read. It
	// can name users and hosts, so only a caller with the admin token sees
	// it; left out otherwise.
	Error string `json:"error,omitempty"`
}
