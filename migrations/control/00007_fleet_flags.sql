-- The fleet's flag plane in the control database: the flags document every
-- replica follows (when the topology's flags_source is "database"), and each
-- replica's heartbeat with the version of the flags it applied, so a kill
-- switch can tell when the whole fleet obeys.

-- +goose Up
CREATE TABLE rollout_flags (
  id         TINYINT     NOT NULL, -- always 1: one flags document per control database
  version    BIGINT      NOT NULL, -- the document's metadata.version; grows with every change
  document   MEDIUMTEXT  NOT NULL, -- flagd's JSON flag format, as rendered (docs/flags.md)
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

CREATE TABLE rollout_replicas (
  replica_id      VARCHAR(128) NOT NULL, -- host, pid and start time: unique per process
  pods            VARCHAR(1024) NOT NULL, -- the pods it serves, comma-separated
  applied_version BIGINT       NOT NULL, -- the flags version its flag source answers with (0: none loaded)
  applied_at      DATETIME(6)  NOT NULL, -- when it applied that version
  last_seen       DATETIME(6)  NOT NULL, -- its last heartbeat
  PRIMARY KEY (replica_id),
  KEY idx_rollout_replicas_seen (last_seen)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE rollout_replicas;
DROP TABLE rollout_flags;
