-- One page per incident across regions: each instance publishes how it sees each target (for a
-- true regional/global scope), and instances sharing the database agree on who pages an
-- incident through a lease row, with one sighting row per region. Times are fixed-width UTC text.
CREATE TABLE target_status (
    region       TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    model        TEXT    NOT NULL,
    route        TEXT    NOT NULL DEFAULT '',
    state        TEXT    NOT NULL,
    over_latency INTEGER NOT NULL,
    breaker      TEXT    NOT NULL,
    updated_at   TEXT    NOT NULL,
    PRIMARY KEY (region, provider, model, route)
);
CREATE INDEX target_status_updated ON target_status (updated_at);

CREATE TABLE incident_lease (
    incident   TEXT NOT NULL PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at TEXT NOT NULL
);

CREATE TABLE incident_sightings (
    incident   TEXT    NOT NULL,
    region     TEXT    NOT NULL,
    firing     INTEGER NOT NULL,
    updated_at TEXT    NOT NULL,
    PRIMARY KEY (incident, region)
);
