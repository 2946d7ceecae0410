-- Handoffs to MySQL copy ahead (docs/ownership.md, section 3): Redis keeps
-- deciding while its state is copied into MySQL, and the cut-over moves only
-- what changed since. While a copy is under way MySQL keeps no shadow holds
-- of its own for the shop (their writes are refused), so that what it holds
-- is exactly what was copied. The handoff sweeper reports its progress per
-- pod in handoff_progress.

-- +goose Up
ALTER TABLE reservation_fences
  ADD COLUMN copying BIGINT NOT NULL DEFAULT 0; -- the copy under way (Redis's copy id), 0: none

-- One row per pod database: the last pass of the handoff sweeper, which
-- hands every shop off to the store the flags name when they change.
CREATE TABLE handoff_progress (
  id             TINYINT      NOT NULL, -- always 1
  flags_version  BIGINT       NOT NULL, -- the flags version the pass worked to
  shops          BIGINT       NOT NULL, -- shops whose decider that version moved
  done           BIGINT       NOT NULL, -- of those, handed off
  pending        BIGINT       NOT NULL, -- of those, still to hand off
  failed         BIGINT       NOT NULL, -- of the pending, failed at the last try
  oldest_pending DATETIME(3)  NULL,     -- since when the oldest pending shop has waited
  started_at     DATETIME(3)  NOT NULL, -- when the version was first seen
  finished_at    DATETIME(3)  NULL,     -- when the last of its shops was handed off
  updated_at     DATETIME(3)  NOT NULL,
  replica        VARCHAR(128) NOT NULL, -- who ran the pass
  last_error     TEXT         NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE handoff_progress;
ALTER TABLE reservation_fences DROP COLUMN copying;
