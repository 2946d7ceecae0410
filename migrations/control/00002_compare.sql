-- The comparer's durable state: sampled diff records and per-window stats.
-- Portable to MySQL 8.0+ and MariaDB 10.6+: no engine-specific types (JSON
-- documents are TEXT). Labels (pod, mode, op, class) are VARBINARY so they
-- compare exactly, as they do in Prometheus.

-- +goose Up

-- Sampled diff records: both sides of a non-match observation in full, at a
-- capped rate. Deleted past the comparer's Retention, oldest first.
CREATE TABLE compare_diffs (
  id              BIGINT         NOT NULL AUTO_INCREMENT,
  pod             VARBINARY(64)  NOT NULL,
  observed_at     DATETIME(3)    NOT NULL, -- when the call started (UTC)
  recorded_at     DATETIME(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  mode            VARBINARY(32)  NOT NULL,
  op              VARBINARY(16)  NOT NULL,
  class           VARBINARY(32)  NOT NULL,
  shop_id         BIGINT         NOT NULL,
  token           VARBINARY(64)  NOT NULL,
  authority_store VARCHAR(8)     NOT NULL,
  shadow_store    VARCHAR(8)     NOT NULL,
  authority       TEXT           NOT NULL, -- JSON: compare.OutcomeRecord
  shadow          TEXT           NOT NULL, -- JSON: compare.OutcomeRecord
  PRIMARY KEY (id),
  -- the dashboard: recent diffs of one pod, newest first
  KEY idx_compare_diffs_pod_recent (pod, observed_at),
  -- retention cleanup (oldest first) and recent diffs of every pod
  KEY idx_compare_diffs_retention (observed_at)
) ENGINE=InnoDB;

-- Stats: observations per pod x window x mode x operation x class, summed
-- over every replica (each adds its increments), with the latency of each
-- side. The rollout gates read them.
CREATE TABLE compare_stats (
  pod              VARBINARY(64) NOT NULL,
  window_start     DATETIME      NOT NULL, -- UTC, a multiple of the comparer's Window
  mode             VARBINARY(32) NOT NULL,
  op               VARBINARY(16) NOT NULL,
  class            VARBINARY(32) NOT NULL,
  n                BIGINT        NOT NULL,
  authority_n      BIGINT        NOT NULL, -- authority latencies observed
  authority_us_sum BIGINT        NOT NULL,
  authority_us_max BIGINT        NOT NULL,
  shadow_n         BIGINT        NOT NULL, -- shadow latencies observed (not skipped)
  shadow_us_sum    BIGINT        NOT NULL,
  shadow_us_max    BIGINT        NOT NULL,
  updated_at       DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (pod, window_start, mode, op, class),
  -- retention cleanup and totals over every pod
  KEY idx_compare_stats_retention (window_start)
) ENGINE=InnoDB;

-- One row per stats flush of a comparer, written in the flush's
-- transaction: a retried flush whose first attempt did commit (the client
-- missed the answer) hits the duplicate id and is not counted twice.
CREATE TABLE compare_flushes (
  flush_id   BINARY(16)  NOT NULL,
  flushed_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (flush_id),
  KEY idx_compare_flushes_retention (flushed_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE compare_flushes;
DROP TABLE compare_stats;
DROP TABLE compare_diffs;
