-- The trace context of the call that wrote a change (docs/tracing.md): the
-- W3C traceparent of its span, when tracing was on and the call was
-- sampled, so that the relay's span applying the change can link to the
-- checkout call behind it. NULL otherwise; the relay never reads it for
-- anything but the link.

-- +goose Up
ALTER TABLE reservation_outbox
  ADD COLUMN trace VARBINARY(55) NULL; -- traceparent: 00-<32 hex>-<16 hex>-<2 hex>

-- +goose Down
ALTER TABLE reservation_outbox
  DROP COLUMN trace;
