-- One decider per shop, the change feed Redis follows, and tombstones
-- (docs/ownership.md). Portable to MySQL 8.0+ and MariaDB 10.6+.

-- +goose Up

-- Which store decides a shop's reservations. No row means Redis decides
-- (epoch 0). A shop's fence is kept in several slot rows that always say
-- the same: every deciding transaction of MySQL holds a shared lock on one
-- slot (its token's), a handoff locks them all for update. One row would
-- queue every reserver of a busy shop on a single record's locks.
CREATE TABLE reservation_fences (
  shop_id    BIGINT      NOT NULL,
  slot       TINYINT     NOT NULL, -- 0..7
  decider    VARCHAR(8)  NOT NULL, -- 'mysql' or 'redis'
  epoch      BIGINT      NOT NULL, -- the flags version of the handoff
  changed_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (shop_id, slot)
) ENGINE=InnoDB;

-- One row per (shop, token): the reservation's state. A held reservation's
-- lines are in reserved_quantities; a terminal one (claimed, released,
-- expired, refused) is a tombstone, forgotten once its expires_at is older
-- than the tombstone retention (a terminal state is never reached before
-- its hold's expiry would have been, except refusals and legacy claims,
-- whose expires_at is when they were made). Every transition of a
-- reservation locks this row first.
CREATE TABLE reservations (
  shop_id     BIGINT        NOT NULL,
  token       VARBINARY(64) NOT NULL,
  state       VARCHAR(8)    NOT NULL, -- held, claimed, released, expired, refused
  decided_by  VARCHAR(8)    NOT NULL, -- the store that decided the state: 'mysql' or 'redis'
  allocations VARCHAR(4096) NOT NULL, -- "item:location:quantity,..." held, or deducted
  short       VARCHAR(4096) NOT NULL DEFAULT '', -- refused: "item:requested:unheld,..."
  expires_at  DATETIME(3)   NOT NULL, -- the hold's expiry (database clock)
  changed_at  DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (shop_id, token),
  -- the reaper (held, by expiry) and the tombstone collector (terminal
  -- states, by expiry)
  KEY idx_reservations_due (state, expires_at)
) ENGINE=InnoDB;

-- The change feed (a transactional outbox): every change Redis must follow,
-- written in the transaction that makes it. The relay applies rows in id
-- order and deletes them.
CREATE TABLE reservation_outbox (
  id         BIGINT        NOT NULL AUTO_INCREMENT,
  shop_id    BIGINT        NOT NULL,
  kind       VARCHAR(8)    NOT NULL, -- 'state', 'adjust', 'fence'
  token      VARBINARY(64) NOT NULL DEFAULT '',
  item_id    BIGINT        NOT NULL DEFAULT 0,  -- adjust
  location_id BIGINT       NOT NULL DEFAULT 0,  -- adjust
  delta      BIGINT        NOT NULL DEFAULT 0,  -- adjust
  decider    VARCHAR(8)    NOT NULL DEFAULT '', -- fence
  epoch      BIGINT        NOT NULL DEFAULT 0,  -- fence
  created_at DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  -- a shop's pending changes, in order (a handoff's drain)
  KEY idx_outbox_shop (shop_id)
) ENGINE=InnoDB;

SET SESSION group_concat_max_len = 1048576;

-- Reservations held before this migration get their state row. Redis
-- decided them all (no shop had a fence yet).
INSERT INTO reservations (shop_id, token, state, decided_by, allocations, expires_at)
SELECT shop_id, token, 'held', MAX(authority),
       GROUP_CONCAT(CONCAT(inventory_item_id, ':', location_id, ':', quantity)
                    ORDER BY inventory_item_id, location_id SEPARATOR ','),
       MIN(expires_at)
  FROM reserved_quantities
 GROUP BY shop_id, token;

-- The reaper now walks reservations by expiry.
ALTER TABLE reserved_quantities DROP KEY idx_reserved_expiry;

-- A keyed adjust remembers its change-feed entry, so a replay lets Redis
-- apply the same entry (once).
ALTER TABLE stock_adjustments ADD COLUMN change_id BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE stock_adjustments DROP COLUMN change_id;
ALTER TABLE reserved_quantities ADD KEY idx_reserved_expiry (expires_at);
DROP TABLE reservation_outbox;
DROP TABLE reservations;
DROP TABLE reservation_fences;
