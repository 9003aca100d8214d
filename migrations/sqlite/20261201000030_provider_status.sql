-- The providers' own status pages (docs/OPERATIONS.md, "Providers' status pages"): incidents as
-- the provider reported them, and each component's latest state. Shared by every region.
CREATE TABLE provider_incidents (
    provider     TEXT NOT NULL,
    incident_id  TEXT NOT NULL,
    name         TEXT NOT NULL,
    status       TEXT NOT NULL,
    impact       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT,
    resolved_at  TEXT,
    components   TEXT NOT NULL DEFAULT '[]',
    shortlink    TEXT,
    PRIMARY KEY (provider, incident_id)
);
CREATE INDEX provider_incidents_created ON provider_incidents (created_at);

CREATE TABLE provider_components (
    provider      TEXT NOT NULL,
    component_id  TEXT NOT NULL,
    name          TEXT NOT NULL,
    status        TEXT NOT NULL,
    updated_at    TEXT,
    PRIMARY KEY (provider, component_id)
);
