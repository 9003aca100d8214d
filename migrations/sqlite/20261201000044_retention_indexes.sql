-- Retention (docs/STORAGE.md, "Retention") deletes old rows in small batches by time; these
-- indexes let each batch find its rows without scanning the table.
CREATE INDEX breaker_transitions_at ON breaker_transitions (at);
CREATE INDEX credit_balances_at ON credit_balances (at);
CREATE INDEX alert_outbox_delivered ON alert_outbox (delivered_at) WHERE delivered_at IS NOT NULL;
CREATE INDEX alert_outbox_abandoned ON alert_outbox (abandoned_at) WHERE abandoned_at IS NOT NULL;
