package controldb

import (
	"context"
	"time"
)

// A replica's heartbeat (rollout_replicas): who it is, which pods it
// serves, which version of the flags its flag source answers with and
// since when, and when it last reported (callers: rollout's Heartbeat,
// Replicas and the kill switch).
const (
	// sqlHeartbeat reports a replica; applied_at moves only when the
	// version does. The database's clock stamps both times, so replicas
	// with skewed clocks compare on one clock.
	sqlHeartbeat = `/*caller='heartbeat'*/ INSERT INTO rollout_replicas (replica_id, pods, applied_version, applied_at, last_seen)
  VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
  ON DUPLICATE KEY UPDATE pods = VALUES(pods),
    applied_at = IF(applied_version = VALUES(applied_version), applied_at, VALUES(applied_at)),
    applied_version = VALUES(applied_version), last_seen = VALUES(last_seen)`
	sqlHeartbeatGone = `/*caller='heartbeat'*/ DELETE FROM rollout_replicas WHERE replica_id = ?`
	// sqlReplicasLive lists the replicas heard from within the last ?
	// microseconds, and how long ago.
	sqlReplicasLive = `/*caller='heartbeat'*/ SELECT replica_id, pods, applied_version, applied_at,
    TIMESTAMPDIFF(MICROSECOND, last_seen, UTC_TIMESTAMP(6))
  FROM rollout_replicas WHERE last_seen >= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY replica_id`
	// sqlReplicasForget drops replicas not heard from for ? microseconds.
	sqlReplicasForget = `/*caller='heartbeat'*/ DELETE FROM rollout_replicas WHERE last_seen < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`
	// sqlAppliedHighest is the highest version any replica reported.
	sqlAppliedHighest = `/*caller='rollout'*/ SELECT COALESCE(MAX(applied_version), 0) FROM rollout_replicas`
	// sqlAppliedHighestLow is sqlAppliedHighest of the versions' low bits
	// (a mask): the kill switch document's part of an epoch.
	sqlAppliedHighestLow = `/*caller='rollout'*/ SELECT COALESCE(MAX(applied_version & ?), 0) FROM rollout_replicas`
)

// Heartbeat reports the replica id: the pods it serves (comma-separated)
// and the flags version it applied, both stamped now by the database's
// clock; applied_at moves only when applied does.
func Heartbeat(ctx context.Context, q Querier, id, pods string, applied int64) error {
	_, err := q.ExecContext(ctx, sqlHeartbeat, id, pods, applied)
	return err
}

// DeleteReplica removes the replica id's heartbeat: a replica that stops
// cleanly leaves the fleet at once.
func DeleteReplica(ctx context.Context, q Querier, id string) error {
	_, err := q.ExecContext(ctx, sqlHeartbeatGone, id)
	return err
}

// ForgetReplicas removes the heartbeats of replicas not heard from for
// longer than gone (by the database's clock, to the microsecond).
func ForgetReplicas(ctx context.Context, q Querier, gone time.Duration) error {
	_, err := q.ExecContext(ctx, sqlReplicasForget, gone.Microseconds())
	return err
}

// ReplicaRow is one live replica's heartbeat.
type ReplicaRow struct {
	// ID is the replica's id.
	ID string
	// Pods are the pods it serves, comma-separated as reported.
	Pods string
	// AppliedVersion is the flags version it applied, since AppliedAt
	// (the database's clock).
	AppliedVersion int64
	AppliedAt      time.Time
	// SeenAgo is how long ago it last reported (to the microsecond).
	SeenAgo time.Duration
}

// LiveReplicas lists the replicas heard from within the last within, by
// id.
func LiveReplicas(ctx context.Context, q Querier, within time.Duration) ([]ReplicaRow, error) {
	rows, err := q.QueryContext(ctx, sqlReplicasLive, within.Microseconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ReplicaRow
	for rows.Next() {
		var (
			r   ReplicaRow
			ago int64
		)
		if err := rows.Scan(&r.ID, &r.Pods, &r.AppliedVersion, &r.AppliedAt, &ago); err != nil {
			return nil, err
		}
		r.SeenAgo = time.Duration(ago) * time.Microsecond
		out = append(out, r)
	}
	return out, rows.Err()
}

// AppliedHighest returns the highest flags version any replica reported
// applied (0 with none): a document below it is refused by the replicas.
func AppliedHighest(ctx context.Context, q Querier) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, sqlAppliedHighest).Scan(&v)
	return v, err
}

// AppliedHighestLow is AppliedHighest of each version's bits under mask
// (a power of two less one): the highest kill switch document version any
// replica applied, when the versions are epochs (flagsource.Epoch).
func AppliedHighestLow(ctx context.Context, q Querier, mask int64) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, sqlAppliedHighestLow, mask).Scan(&v)
	return v, err
}
