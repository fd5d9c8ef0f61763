-- Secrets every server process of the workspace shares, made by the first that needs one:
-- a 2026-07-28 requestState sealed by one server opens on another, and after a restart.
CREATE TABLE server_keys (
  name   TEXT PRIMARY KEY,
  secret TEXT NOT NULL -- 64 random hex digits
);
