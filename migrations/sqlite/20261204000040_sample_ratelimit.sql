-- Rate-limit headroom (docs/STORAGE.md): what each probe's response headers said was left of the
-- provider's request and token allowances, and when each resets (null when not said; times are
-- UTC text like every other). Canary runs and golden check runs are probes too and carry the same columns.
ALTER TABLE samples ADD COLUMN ratelimit_requests_remaining INTEGER;
ALTER TABLE samples ADD COLUMN ratelimit_requests_limit INTEGER;
ALTER TABLE samples ADD COLUMN ratelimit_requests_reset_at TEXT;
ALTER TABLE samples ADD COLUMN ratelimit_tokens_remaining INTEGER;
ALTER TABLE samples ADD COLUMN ratelimit_tokens_limit INTEGER;
ALTER TABLE samples ADD COLUMN ratelimit_tokens_reset_at TEXT;
ALTER TABLE canary_runs ADD COLUMN ratelimit_requests_remaining INTEGER;
ALTER TABLE canary_runs ADD COLUMN ratelimit_requests_limit INTEGER;
ALTER TABLE canary_runs ADD COLUMN ratelimit_requests_reset_at TEXT;
ALTER TABLE canary_runs ADD COLUMN ratelimit_tokens_remaining INTEGER;
ALTER TABLE canary_runs ADD COLUMN ratelimit_tokens_limit INTEGER;
ALTER TABLE canary_runs ADD COLUMN ratelimit_tokens_reset_at TEXT;
ALTER TABLE check_runs ADD COLUMN ratelimit_requests_remaining INTEGER;
ALTER TABLE check_runs ADD COLUMN ratelimit_requests_limit INTEGER;
ALTER TABLE check_runs ADD COLUMN ratelimit_requests_reset_at TEXT;
ALTER TABLE check_runs ADD COLUMN ratelimit_tokens_remaining INTEGER;
ALTER TABLE check_runs ADD COLUMN ratelimit_tokens_limit INTEGER;
ALTER TABLE check_runs ADD COLUMN ratelimit_tokens_reset_at TEXT;
