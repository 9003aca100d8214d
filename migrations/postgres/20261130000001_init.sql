-- vigil schema v1 (PostgreSQL). See docs/STORAGE.md for every table and column.

-- Raw probe samples, one partition per UTC day (samples_YYYYMMDD), created on demand by vigil.
CREATE TABLE samples (
    id            uuid             NOT NULL,
    provider      text             NOT NULL,
    model         text             NOT NULL,
    route         text             NOT NULL DEFAULT '',
    region        text             NOT NULL,
    scheduled_at  timestamptz      NOT NULL,
    started_at    timestamptz      NOT NULL,
    dns_ms        double precision,
    connect_ms    double precision,
    tls_ms        double precision,
    ttfb_ms       double precision,
    ttft_ms       double precision,
    ttfr_ms       double precision,
    total_ms      double precision,
    input_tokens  bigint,
    output_tokens bigint,
    tokens_per_s  double precision,
    status        integer,
    outcome       text             NOT NULL,
    error         text,
    request_id    text,
    adherence_ok  boolean,
    cost_usd      double precision,
    retry_after_s double precision,
    PRIMARY KEY (id, started_at)
) PARTITION BY RANGE (started_at);

CREATE INDEX samples_region_started ON samples (region, started_at);
CREATE INDEX samples_region_target_started ON samples (region, provider, model, route, started_at);

-- Hourly HdrHistogram rollups per target x region x metric (baselines merge these).
CREATE TABLE rollups (
    provider  text        NOT NULL,
    model     text        NOT NULL,
    route     text        NOT NULL DEFAULT '',
    region    text        NOT NULL,
    metric    text        NOT NULL,
    hour      timestamptz NOT NULL,
    count     bigint      NOT NULL,
    histogram bytea       NOT NULL,
    PRIMARY KEY (region, provider, model, route, metric, hour)
);
CREATE INDEX rollups_hour ON rollups (hour);

-- Current circuit-breaker state per target x region.
CREATE TABLE breaker_state (
    provider text        NOT NULL,
    model    text        NOT NULL,
    route    text        NOT NULL DEFAULT '',
    region   text        NOT NULL,
    state    text        NOT NULL,
    since    timestamptz NOT NULL,
    detail   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (region, provider, model, route)
);

-- Breaker transition history.
CREATE TABLE breaker_transitions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider   text        NOT NULL,
    model      text        NOT NULL,
    route      text        NOT NULL DEFAULT '',
    region     text        NOT NULL,
    from_state text        NOT NULL,
    to_state   text        NOT NULL,
    at         timestamptz NOT NULL,
    reason     text        NOT NULL
);
CREATE INDEX breaker_transitions_region_target_at ON breaker_transitions (region, provider, model, route, at);
CREATE INDEX breaker_transitions_region_at ON breaker_transitions (region, at);

-- Durable alert outbox: notifications waiting for (or done with) delivery.
CREATE TABLE alert_outbox (
    id              uuid        PRIMARY KEY,
    channel         text        NOT NULL,
    kind            text        NOT NULL,
    dedup_key       text        NOT NULL,
    payload         jsonb       NOT NULL,
    created_at      timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    delivered_at    timestamptz,
    abandoned_at    timestamptz
);
CREATE INDEX alert_outbox_pending ON alert_outbox (next_attempt_at, created_at)
    WHERE delivered_at IS NULL AND abandoned_at IS NULL;

-- Alert engine state, one JSON document per region.
CREATE TABLE alert_state (
    region     text        PRIMARY KEY,
    state      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Credit balance readings.
CREATE TABLE credit_balances (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider      text             NOT NULL,
    region        text             NOT NULL,
    at            timestamptz      NOT NULL,
    remaining_usd double precision NOT NULL
);
CREATE INDEX credit_balances_provider_at ON credit_balances (provider, at);
