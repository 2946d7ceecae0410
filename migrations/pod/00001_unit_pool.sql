-- The ledger and the MySQL unit-pool reservation store.
-- Portable to MySQL 8.0+ and MariaDB 10.6+: no engine-specific types.

-- +goose Up

-- The ledger: sellable quantity per shop x item x location, the source of
-- truth for stock. "available" includes units currently held; a claim
-- deducts it.
CREATE TABLE inventory_ledger (
  shop_id           BIGINT      NOT NULL,
  inventory_item_id BIGINT      NOT NULL,
  location_id       BIGINT      NOT NULL,
  available         BIGINT      NOT NULL,
  version           BIGINT      NOT NULL DEFAULT 0,
  updated_at        DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (shop_id, inventory_item_id, location_id)
) ENGINE=InnoDB;

-- The unit pool: one row per reservable unit, at most pool_cap per
-- item x location. The filter columns lead the primary key and there is no
-- secondary index, so taking a unit locks exactly one index record.
CREATE TABLE available_units (
  shop_id           BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  location_id       BIGINT NOT NULL,
  unit_id           BIGINT NOT NULL,
  PRIMARY KEY (shop_id, inventory_item_id, location_id, unit_id)
) ENGINE=InnoDB;

-- Holds: quantity per (shop, token, item, location), with the expiry on the
-- database clock and the authority that created the hold.
CREATE TABLE reserved_quantities (
  shop_id           BIGINT        NOT NULL,
  token             VARBINARY(64) NOT NULL,
  inventory_item_id BIGINT        NOT NULL,
  location_id       BIGINT        NOT NULL,
  quantity          BIGINT        NOT NULL,
  expires_at        DATETIME(3)   NOT NULL,
  authority         VARCHAR(8)    NOT NULL,
  created_at        DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (shop_id, token, inventory_item_id, location_id),
  -- the replenisher and availability sum holds per item x location
  KEY idx_reserved_item (shop_id, inventory_item_id, location_id),
  -- the reaper walks expired holds oldest first
  KEY idx_reserved_expiry (expires_at)
) ENGINE=InnoDB;

-- Claims: one row per claimed (shop, token), inserted in the same
-- transaction as the ledger deduction. Its primary key is what makes the
-- deduction happen exactly once, whoever retries.
CREATE TABLE reservation_claims (
  shop_id     BIGINT        NOT NULL,
  token       VARBINARY(64) NOT NULL,
  allocations TEXT          NOT NULL, -- JSON: [{"item":..,"location":..,"quantity":..}]
  via         VARCHAR(16)   NOT NULL, -- 'claim' (MySQL authority) or 'deduct' (legacy Redis claim)
  claimed_at  DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (shop_id, token)
) ENGINE=InnoDB;

-- Single-flight replenish lock, one row per item x location. Whoever adds
-- units to a pool (the replenisher) or sets the stock under it (adjust)
-- holds it, so the pool's count and its unit ids are decided by one
-- transaction at a time. (The legacy claim's deduct does not: a refill
-- reads the ledger row with a shared lock instead; see mysqlstore.)
CREATE TABLE pool_replenish_locks (
  shop_id             BIGINT      NOT NULL,
  inventory_item_id   BIGINT      NOT NULL,
  location_id         BIGINT      NOT NULL,
  next_unit_id        BIGINT      NOT NULL DEFAULT 1,
  refills             BIGINT      NOT NULL DEFAULT 0,
  last_replenished_at DATETIME(3) NULL,
  PRIMARY KEY (shop_id, inventory_item_id, location_id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE pool_replenish_locks;
DROP TABLE reservation_claims;
DROP TABLE reserved_quantities;
DROP TABLE available_units;
DROP TABLE inventory_ledger;
