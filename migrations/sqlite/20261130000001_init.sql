-- vigil schema v1 (SQLite). See docs/STORAGE.md for every table and column.
-- Times are UTC text 'YYYY-MM-DDTHH:MM:SS.ffffffZ' (fixed width, so text order is time order).
-- ids are UUID text; JSON columns hold JSON text.

CREATE TABLE samples (
    id            TEXT    NOT NULL PRIMARY KEY,
    provider      TEXT    NOT NULL,
    model         TEXT    NOT NULL,
    route         TEXT    NOT NULL DEFAULT '',
    region        TEXT    NOT NULL,
    scheduled_at  TEXT    NOT NULL,
    started_at    TEXT    NOT NULL,
    dns_ms        REAL,
    connect_ms    REAL,
    tls_ms        REAL,
    ttfb_ms       REAL,
    ttft_ms       REAL,
    ttfr_ms       REAL,
    total_ms      REAL,
    input_tokens  INTEGER,
    output_tokens INTEGER,
    tokens_per_s  REAL,
    status        INTEGER,
    outcome       TEXT    NOT NULL,
    error         TEXT,
    request_id    TEXT,
    adherence_ok  INTEGER,
    cost_usd      REAL,
    retry_after_s REAL
);
CREATE INDEX samples_region_started ON samples (region, started_at);
CREATE INDEX samples_region_target_started ON samples (region, provider, model, route, started_at);
CREATE INDEX samples_started ON samples (started_at);

CREATE TABLE rollups (
    provider  TEXT    NOT NULL,
    model     TEXT    NOT NULL,
    route     TEXT    NOT NULL DEFAULT '',
    region    TEXT    NOT NULL,
    metric    TEXT    NOT NULL,
    hour      TEXT    NOT NULL,
    count     INTEGER NOT NULL,
    histogram BLOB    NOT NULL,
    PRIMARY KEY (region, provider, model, route, metric, hour)
);
CREATE INDEX rollups_hour ON rollups (hour);

CREATE TABLE breaker_state (
    provider TEXT NOT NULL,
    model    TEXT NOT NULL,
    route    TEXT NOT NULL DEFAULT '',
    region   TEXT NOT NULL,
    state    TEXT NOT NULL,
    since    TEXT NOT NULL,
    detail   TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (region, provider, model, route)
);

CREATE TABLE breaker_transitions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    provider   TEXT NOT NULL,
    model      TEXT NOT NULL,
    route      TEXT NOT NULL DEFAULT '',
    region     TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    at         TEXT NOT NULL,
    reason     TEXT NOT NULL
);
CREATE INDEX breaker_transitions_region_target_at ON breaker_transitions (region, provider, model, route, at);
CREATE INDEX breaker_transitions_region_at ON breaker_transitions (region, at);

CREATE TABLE alert_outbox (
    id              TEXT    NOT NULL PRIMARY KEY,
    channel         TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    dedup_key       TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    next_attempt_at TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    delivered_at    TEXT,
    abandoned_at    TEXT
);
CREATE INDEX alert_outbox_pending ON alert_outbox (next_attempt_at, created_at)
    WHERE delivered_at IS NULL AND abandoned_at IS NULL;

CREATE TABLE alert_state (
    region     TEXT NOT NULL PRIMARY KEY,
    state      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE credit_balances (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    provider      TEXT NOT NULL,
    region        TEXT NOT NULL,
    at            TEXT NOT NULL,
    remaining_usd REAL NOT NULL
);
CREATE INDEX credit_balances_provider_at ON credit_balances (provider, at);
