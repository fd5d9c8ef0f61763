-- Git-backed tools: the repositories of missions and works, the commits toolgate made in
-- them, pull requests, the files of tenant-scope agents, and the sub-agent fields of seed 000
-- §3.7. Portable SQL (SQLite and PostgreSQL).

-- A bare repository under the data folder, created on first use. path is relative to the
-- data folder. A mission owns 'mission'; a work owns 'data' and 'website'.
CREATE TABLE repos (
  id             TEXT PRIMARY KEY,
  tenant_id      TEXT NOT NULL REFERENCES tenants (id),
  scope_type     TEXT NOT NULL CHECK (scope_type IN ('mission', 'work')),
  scope_id       TEXT NOT NULL,
  name           TEXT NOT NULL CHECK (name IN ('mission', 'data', 'website')),
  path           TEXT NOT NULL UNIQUE,
  default_branch TEXT NOT NULL,
  -- Pull request numbers are counted per repository; the counter lives on the row so that
  -- two writers never draw the same number.
  last_pr_number BIGINT NOT NULL DEFAULT 0,
  created_at     TEXT NOT NULL,
  UNIQUE (scope_id, name),
  CHECK ((scope_type = 'mission') = (name = 'mission'))
);

-- Every move of a branch toolgate made, recorded in the transaction of the call before the
-- branch moves (DESIGN.md §7). A move found in a repository's intents but not here was never
-- recorded: recovery moves the branch back (src/git/git.h).
CREATE TABLE repo_ref_moves (
  id           TEXT PRIMARY KEY,
  repo_id      TEXT NOT NULL REFERENCES repos (id),
  branch       TEXT NOT NULL,
  old_sha      TEXT,
  new_sha      TEXT NOT NULL,
  principal_id TEXT NOT NULL REFERENCES principals (id),
  run_id       TEXT REFERENCES agent_runs (id),
  tool         TEXT NOT NULL,
  created_at   TEXT NOT NULL
);
CREATE INDEX repo_ref_moves_sha ON repo_ref_moves (repo_id, new_sha);

CREATE TABLE pull_requests (
  id           TEXT PRIMARY KEY,
  repo_id      TEXT NOT NULL REFERENCES repos (id),
  number       BIGINT NOT NULL,
  title        TEXT NOT NULL,
  body         TEXT NOT NULL,
  head_branch  TEXT NOT NULL,
  base_branch  TEXT NOT NULL,
  base_sha     TEXT NOT NULL,
  head_sha     TEXT NOT NULL,
  state        TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'merged', 'closed')),
  author_id    TEXT NOT NULL REFERENCES principals (id),
  merged_sha   TEXT,
  created_at   TEXT NOT NULL,
  updated_at   TEXT NOT NULL,
  UNIQUE (repo_id, number)
);

-- The files of tenant-scope agents, which have no repository (ADR-008: DB-inline).
CREATE TABLE agent_files (
  agent_id   TEXT NOT NULL REFERENCES agents (id),
  name       TEXT NOT NULL CHECK (name IN ('SOUL.md', 'AGENTS.md', 'HEARTBEAT.md', 'TOOLS.md', 'agent.yml')),
  body       TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (agent_id, name)
);

-- Seed 000 §3.7: what createSubAgent sets on the child. NULL cadence means manual.
ALTER TABLE agents ADD COLUMN title TEXT;
ALTER TABLE agents ADD COLUMN capabilities TEXT;
ALTER TABLE agents ADD COLUMN ai_provider_id TEXT;
ALTER TABLE agents ADD COLUMN model_id TEXT;
ALTER TABLE agents ADD COLUMN heartbeat_cadence TEXT;
