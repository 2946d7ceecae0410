-- Traffic: the calls each pod's facade took, per window x mode x operation,
-- in every mode, compared or not. compare_stats counts only the calls both
-- stores answered, and nothing is compared in redis or mysql_only mode, so
-- it cannot say which pod is busy before its shadow stage; this can
-- (`reservoir rollout order-pods`). Summed over every replica: each adds
-- its increments in the comparer's stats flush, exactly once (the flush's
-- id in compare_flushes guards both tables). Same retention as the stats.

-- +goose Up
CREATE TABLE compare_traffic (
  pod          VARBINARY(64) NOT NULL,
  window_start DATETIME      NOT NULL, -- UTC, a multiple of the comparer's Window
  mode         VARBINARY(32) NOT NULL, -- the effective mode the facade applied
  op           VARBINARY(16) NOT NULL, -- reserve, claim, release, adjust
  n            BIGINT        NOT NULL,
  PRIMARY KEY (pod, window_start, mode, op),
  -- retention cleanup and traffic over every pod
  KEY idx_compare_traffic_retention (window_start)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE compare_traffic;
