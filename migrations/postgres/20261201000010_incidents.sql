-- One page per incident across regions: each instance publishes how it sees each target (for a
-- true regional/global scope), and instances sharing the database agree on who pages an
-- incident through a lease row, with one sighting row per region.
CREATE TABLE target_status (
    region       text        NOT NULL,
    provider     text        NOT NULL,
    model        text        NOT NULL,
    route        text        NOT NULL DEFAULT '',
    state        text        NOT NULL,
    over_latency boolean     NOT NULL,
    breaker      text        NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (region, provider, model, route)
);
CREATE INDEX target_status_updated ON target_status (updated_at);

CREATE TABLE incident_lease (
    incident   text        NOT NULL PRIMARY KEY,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE incident_sightings (
    incident   text        NOT NULL,
    region     text        NOT NULL,
    firing     boolean     NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (incident, region)
);
