-- Each regional instance delivers only its own region's alerts, even on a shared database.
ALTER TABLE alert_outbox ADD COLUMN region TEXT NOT NULL DEFAULT '';
CREATE INDEX alert_outbox_region_pending ON alert_outbox (region, next_attempt_at, created_at)
    WHERE delivered_at IS NULL AND abandoned_at IS NULL;
