-- One health judgement (docs/ARCHITECTURE.md, "Health"): the flapping mark is no longer a state
-- of its own, and the row carries the reason other regions' status pages show.
ALTER TABLE target_status ADD COLUMN flapping INTEGER NOT NULL DEFAULT 0;
ALTER TABLE target_status ADD COLUMN reason TEXT;
