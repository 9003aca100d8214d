-- Probes through an HTTP proxy: CONNECT sent -> the proxy's 2xx, in milliseconds (null without a proxy).
ALTER TABLE samples ADD COLUMN proxy_ms REAL;
