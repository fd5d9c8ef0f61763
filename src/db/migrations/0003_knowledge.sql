-- Knowledge: the knowledge base of works, and skills with the bindings that put them in a
-- caller's active set. Portable SQL (SQLite and PostgreSQL).

-- A document belongs to a work. mission_id repeats the work's mission so that reads can be
-- restricted to the caller's reach in the WHERE clause.
CREATE TABLE kb_documents (
  id         TEXT PRIMARY KEY,
  tenant_id  TEXT NOT NULL REFERENCES tenants (id),
  mission_id TEXT NOT NULL REFERENCES missions (id),
  work_id    TEXT NOT NULL REFERENCES works (id),
  slug       TEXT NOT NULL,
  title      TEXT NOT NULL,
  body       TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  UNIQUE (work_id, slug)
);
-- kb.document.get looks a slug up across every work the caller reaches.
CREATE INDEX kb_documents_slug ON kb_documents (tenant_id, slug);

-- allowed_tools: JSON array of tool names; examples: JSON array of {input, output} or NULL.
CREATE TABLE skills (
  id            TEXT PRIMARY KEY,
  tenant_id     TEXT NOT NULL REFERENCES tenants (id),
  slug          TEXT NOT NULL,
  name          TEXT NOT NULL,
  description   TEXT NOT NULL,
  body          TEXT NOT NULL,
  allowed_tools TEXT NOT NULL DEFAULT '[]',
  examples      TEXT,
  created_at    TEXT NOT NULL,
  updated_at    TEXT NOT NULL,
  UNIQUE (tenant_id, slug)
);

-- Where a skill is active: the whole tenant, a mission (with its ideas and works), a work, or
-- one agent. target_id is the mission, work or agent id (agents.id), NULL for the tenant.
CREATE TABLE skill_bindings (
  skill_id   TEXT NOT NULL REFERENCES skills (id),
  level      TEXT NOT NULL CHECK (level IN ('tenant', 'mission', 'work', 'agent')),
  target_id  TEXT,
  created_at TEXT NOT NULL,
  UNIQUE (skill_id, level, target_id),
  CHECK ((level = 'tenant') = (target_id IS NULL))
);
-- NULLs are distinct in UNIQUE constraints on both backends: one tenant binding per skill.
CREATE UNIQUE INDEX skill_bindings_tenant ON skill_bindings (skill_id) WHERE level = 'tenant';
CREATE INDEX skill_bindings_target ON skill_bindings (level, target_id);
