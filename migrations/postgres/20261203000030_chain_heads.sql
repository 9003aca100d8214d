-- The head of each failover chain over time (the target a router tries first, with its price
-- then): one row each time a region's export moves a chain's head, and one at each start. The
-- weekly summary counts time per head and the spend it implied from these.
CREATE TABLE chain_heads (
    region          text             NOT NULL,
    chain           text             NOT NULL,
    at              timestamptz      NOT NULL,
    target          text,
    input_per_mtok  double precision,
    output_per_mtok double precision,
    PRIMARY KEY (region, chain, at)
);
CREATE INDEX chain_heads_at ON chain_heads (at);
