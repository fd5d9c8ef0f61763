-- Foundation: workspaces, principals and their grants, API tokens, agents, the scope tree,
-- tool policy, activity and run telemetry. Portable SQL (SQLite and PostgreSQL).

CREATE TABLE tenants (
  id             TEXT PRIMARY KEY,
  slug           TEXT NOT NULL UNIQUE,
  name           TEXT NOT NULL,
  naming_profile TEXT NOT NULL DEFAULT 'canonical' CHECK (naming_profile IN ('canonical', 'catalog')),
  created_at     TEXT NOT NULL
);

-- Everyone who can call a tool: a user or an agent. Grants and tokens hang off a principal.
CREATE TABLE principals (
  id         TEXT PRIMARY KEY,
  tenant_id  TEXT NOT NULL REFERENCES tenants (id),
  kind       TEXT NOT NULL CHECK (kind IN ('user', 'agent')),
  created_at TEXT NOT NULL
);

CREATE TABLE users (
  id           TEXT PRIMARY KEY,
  tenant_id    TEXT NOT NULL REFERENCES tenants (id),
  principal_id TEXT NOT NULL UNIQUE REFERENCES principals (id),
  username     TEXT NOT NULL,
  role         TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
  created_at   TEXT NOT NULL,
  UNIQUE (tenant_id, username)
);

-- Permissions granted to a principal beyond those of a user's role. An agent's seed-000
-- permission flags are rows here (canAssignTasks = 'tasks.assign', ...).
CREATE TABLE grants (
  principal_id TEXT NOT NULL REFERENCES principals (id),
  permission   TEXT NOT NULL,
  created_at   TEXT NOT NULL,
  PRIMARY KEY (principal_id, permission)
);

-- Only the SHA-256 of a token is kept; the token itself is shown once.
CREATE TABLE api_tokens (
  id           TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL REFERENCES principals (id),
  token_hash   TEXT NOT NULL UNIQUE,
  prefix       TEXT NOT NULL,
  created_at   TEXT NOT NULL,
  last_used_at TEXT,
  revoked_at   TEXT
);

CREATE TABLE missions (
  id                  TEXT PRIMARY KEY,
  tenant_id           TEXT NOT NULL REFERENCES tenants (id),
  slug                TEXT NOT NULL,
  title               TEXT NOT NULL,
  description         TEXT NOT NULL DEFAULT '',
  status              TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'completed', 'failed')),
  current_spend_cents BIGINT NOT NULL DEFAULT 0,
  cap_cents           BIGINT,
  period_end          TEXT,
  created_at          TEXT NOT NULL,
  UNIQUE (tenant_id, slug)
);

CREATE TABLE ideas (
  id         TEXT PRIMARY KEY,
  tenant_id  TEXT NOT NULL REFERENCES tenants (id),
  mission_id TEXT NOT NULL REFERENCES missions (id),
  slug       TEXT NOT NULL,
  title      TEXT NOT NULL,
  status     TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'queued', 'building', 'done', 'failed')),
  created_at TEXT NOT NULL,
  UNIQUE (tenant_id, slug)
);

CREATE TABLE works (
  id         TEXT PRIMARY KEY,
  tenant_id  TEXT NOT NULL REFERENCES tenants (id),
  mission_id TEXT NOT NULL REFERENCES missions (id),
  idea_id    TEXT REFERENCES ideas (id),
  slug       TEXT NOT NULL,
  title      TEXT NOT NULL,
  created_at TEXT NOT NULL,
  UNIQUE (tenant_id, slug)
);

CREATE TABLE agents (
  id                  TEXT PRIMARY KEY,
  tenant_id           TEXT NOT NULL REFERENCES tenants (id),
  principal_id        TEXT NOT NULL UNIQUE REFERENCES principals (id),
  slug                TEXT NOT NULL,
  name                TEXT NOT NULL,
  scope_type          TEXT NOT NULL CHECK (scope_type IN ('tenant', 'mission', 'idea', 'work')),
  scope_id            TEXT,
  status              TEXT NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'active', 'paused', 'archived')),
  content_hash        TEXT,
  created_by_agent_id TEXT REFERENCES agents (id),
  created_at          TEXT NOT NULL,
  updated_at          TEXT NOT NULL,
  UNIQUE (tenant_id, slug),
  CHECK ((scope_type = 'tenant') = (scope_id IS NULL))
);

-- Workspace tool policy: one row per tool (canonical name) that differs from the default.
-- Default: low and medium risk enabled, high risk disabled.
CREATE TABLE tool_policies (
  tenant_id  TEXT NOT NULL REFERENCES tenants (id),
  tool_name  TEXT NOT NULL,
  mode       TEXT NOT NULL CHECK (mode IN ('enabled', 'disabled', 'approval')),
  updated_at TEXT NOT NULL,
  PRIMARY KEY (tenant_id, tool_name)
);

CREATE TABLE agent_runs (
  id         TEXT PRIMARY KEY,
  tenant_id  TEXT NOT NULL REFERENCES tenants (id),
  agent_id   TEXT NOT NULL REFERENCES agents (id),
  status     TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
  trigger    TEXT NOT NULL,
  started_at TEXT NOT NULL,
  ended_at   TEXT
);
CREATE INDEX agent_runs_agent ON agent_runs (agent_id, started_at);

-- One row per tool call (seed 000 §5). run_id is NULL for calls of a user principal.
CREATE TABLE agent_run_logs (
  id           TEXT PRIMARY KEY,
  tenant_id    TEXT NOT NULL REFERENCES tenants (id),
  run_id       TEXT REFERENCES agent_runs (id),
  principal_id TEXT NOT NULL REFERENCES principals (id),
  step         TEXT NOT NULL,
  level        TEXT NOT NULL CHECK (level IN ('INFO', 'WARN', 'ERROR')),
  message      TEXT NOT NULL,
  metadata     TEXT NOT NULL,
  created_at   TEXT NOT NULL
);
CREATE INDEX agent_run_logs_run ON agent_run_logs (run_id, created_at);

CREATE TABLE activity_log (
  id          TEXT PRIMARY KEY,
  tenant_id   TEXT NOT NULL REFERENCES tenants (id),
  mission_id  TEXT REFERENCES missions (id),
  idea_id     TEXT REFERENCES ideas (id),
  work_id     TEXT REFERENCES works (id),
  actor_type  TEXT NOT NULL CHECK (actor_type IN ('user', 'agent')),
  actor_id    TEXT NOT NULL,
  action_type TEXT NOT NULL,
  summary     TEXT NOT NULL,
  details     TEXT,
  created_at  TEXT NOT NULL
);
CREATE INDEX activity_log_tenant ON activity_log (tenant_id, created_at);
