-- Breaker transitions keyed by what they are: one target's move from one state to another at
-- one instant. A record spool replayed twice (a kill during replay, a write that timed out after
-- committing) inserts each once (`ON CONFLICT DO NOTHING`). Copies such replays left before are
-- removed first, the oldest kept. The unique index serves the per-target reads the old
-- (region, provider, model, route, at) index served.
DELETE FROM breaker_transitions
 WHERE id NOT IN (
    SELECT min(id) FROM breaker_transitions
     GROUP BY region, provider, model, route, at, from_state, to_state
 );
CREATE UNIQUE INDEX breaker_transitions_natural_key
    ON breaker_transitions (region, provider, model, route, at, from_state, to_state);
DROP INDEX IF EXISTS breaker_transitions_region_target_at;
