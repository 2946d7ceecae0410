-- A reserve MySQL decides in mysql mode is compared with what Redis would
-- have decided by the relay, not by the facade (docs/compare.md): the
-- change that tells Redis to follow the reservation carries the cart as
-- asked and the comparison's label, and the relay asks Redis about the cart
-- just before applying MySQL's decision. Empty on every other change.

-- +goose Up
ALTER TABLE reservation_outbox
  ADD COLUMN cart       MEDIUMBLOB    NULL,                -- the cart, reservation.EncodeCart (the longest valid cart is about 110 KB)
  ADD COLUMN cart_label VARBINARY(32) NOT NULL DEFAULT ''; -- the comparer's mode

-- +goose Down
ALTER TABLE reservation_outbox
  DROP COLUMN cart,
  DROP COLUMN cart_label;
