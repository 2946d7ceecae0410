-- The rollout controller's durable state: where the plan stands, and every
-- change anyone made (who, when, why, before, after).

-- +goose Up
CREATE TABLE rollout_state (
  id    TINYINT     NOT NULL, -- always 1: one plan per control database
  stage INT         NOT NULL, -- index of the stage in force, -1 before the first
  since DATETIME(3) NOT NULL, -- when it was applied: gates count from here
  PRIMARY KEY (id)
) ENGINE=InnoDB;

CREATE TABLE rollout_audit (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  at           DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  actor        VARCHAR(128) NOT NULL,
  action       VARCHAR(32)  NOT NULL, -- advance, override, kill, release, auto_advance, auto_kill
  scope        VARCHAR(128) NOT NULL,
  reason       TEXT         NOT NULL,
  stage        INT          NULL,     -- the stage in force after the change
  before_flags MEDIUMTEXT   NOT NULL, -- the flags file before, as rendered
  after_flags  MEDIUMTEXT   NOT NULL,
  PRIMARY KEY (id),
  KEY idx_rollout_audit_at (at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE rollout_audit;
DROP TABLE rollout_state;
