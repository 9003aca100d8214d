-- Breaker transitions keyed by what they are: one target's move from one state to another at
-- one instant. A record spool replayed twice (a kill during replay, a write that timed out after
-- committing) inserts each once (`ON CONFLICT DO NOTHING`). Copies such replays left before are
-- removed first, the oldest kept. The unique index serves the per-target reads the old
-- (region, provider, model, route, at) index served.
DELETE FROM breaker_transitions t
 USING breaker_transitions k
 WHERE t.id > k.id
   AND t.region = k.region AND t.provider = k.provider AND t.model = k.model AND t.route = k.route
   AND t.at = k.at AND t.from_state = k.from_state AND t.to_state = k.to_state;
CREATE UNIQUE INDEX breaker_transitions_natural_key
    ON breaker_transitions (region, provider, model, route, at, from_state, to_state);
DROP INDEX IF EXISTS breaker_transitions_region_target_at;
