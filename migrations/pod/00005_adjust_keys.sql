-- Idempotent adjusts: one row per adjust made with a key, in the adjust's
-- own transaction, so a repeat with the key changes nothing and answers
-- the first result (mysqlstore.Store.AdjustStock).

-- +goose Up
CREATE TABLE stock_adjustments (
  shop_id           BIGINT        NOT NULL,
  adjust_key        VARBINARY(64) NOT NULL,
  inventory_item_id BIGINT        NOT NULL,
  location_id       BIGINT        NOT NULL,
  request           VARCHAR(40)   NOT NULL, -- 'available=N' or 'delta=N': a reused key must ask the same
  delta             BIGINT        NOT NULL, -- the change applied
  available         BIGINT        NOT NULL, -- the ledger after it
  adjusted_at       DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (shop_id, adjust_key)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE stock_adjustments;
