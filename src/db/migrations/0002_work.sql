-- Work management: tasks with their participants, blockers and chat, and the durable queue
-- of dispatches (agent runs) that task events cause. Portable SQL (SQLite and PostgreSQL).

-- Task slugs are T-<n> with n counted per workspace; the counter is a row of its own so
-- that two writers never draw the same number (an upsert with RETURNING on both backends).
CREATE TABLE task_counters (
  tenant_id   TEXT PRIMARY KEY REFERENCES tenants (id),
  last_number BIGINT NOT NULL
);

CREATE TABLE tasks (
  id              TEXT PRIMARY KEY,
  tenant_id       TEXT NOT NULL REFERENCES tenants (id),
  slug            TEXT NOT NULL,
  title           TEXT NOT NULL,
  description     TEXT NOT NULL DEFAULT '',
  priority        TEXT NOT NULL DEFAULT 'p3' CHECK (priority IN ('p0', 'p1', 'p2', 'p3', 'p4')),
  labels          TEXT NOT NULL DEFAULT '[]',
  status          TEXT NOT NULL DEFAULT 'backlog'
                  CHECK (status IN ('backlog', 'todo', 'in_progress', 'in_review', 'blocked', 'done', 'cancelled')),
  -- The status a task had when it was blocked, restored when its last blocker closes.
  previous_status TEXT,
  parent_task_id  TEXT REFERENCES tasks (id),
  -- The scope, with every parent filled (a work's idea and mission), so reach is a comparison.
  mission_id      TEXT REFERENCES missions (id),
  idea_id         TEXT REFERENCES ideas (id),
  work_id         TEXT REFERENCES works (id),
  created_by_type TEXT NOT NULL CHECK (created_by_type IN ('user', 'agent')),
  created_by_id   TEXT NOT NULL,
  auto_start      INTEGER NOT NULL DEFAULT 0 CHECK (auto_start IN (0, 1)),
  -- How many times the task was started (entered in_progress, or was auto-started at
  -- creation): the n-th start dispatches its runs under dedupe keys ending in n.
  start_count     INTEGER NOT NULL DEFAULT 0,
  started_at      TEXT,
  completed_at    TEXT,
  created_at      TEXT NOT NULL,
  updated_at      TEXT NOT NULL,
  UNIQUE (tenant_id, slug)
);
CREATE INDEX tasks_tenant_status ON tasks (tenant_id, status);
CREATE INDEX tasks_parent ON tasks (parent_task_id);

-- Who is on a task and as what. approved_at is set once an approver approved.
CREATE TABLE task_assignees (
  task_id     TEXT NOT NULL REFERENCES tasks (id),
  actor_type  TEXT NOT NULL CHECK (actor_type IN ('agent', 'user')),
  actor_id    TEXT NOT NULL,
  role        TEXT NOT NULL CHECK (role IN ('assignee', 'reviewer', 'approver')),
  approved_at TEXT,
  created_at  TEXT NOT NULL,
  PRIMARY KEY (task_id, actor_type, actor_id, role),
  CHECK (approved_at IS NULL OR role = 'approver')
);
CREATE INDEX task_assignees_actor ON task_assignees (actor_type, actor_id);

-- task_id cannot move to in_progress or done while blocked_by_task_id is open.
CREATE TABLE task_blocks (
  task_id            TEXT NOT NULL REFERENCES tasks (id),
  blocked_by_task_id TEXT NOT NULL REFERENCES tasks (id),
  created_at         TEXT NOT NULL,
  PRIMARY KEY (task_id, blocked_by_task_id),
  CHECK (task_id <> blocked_by_task_id)
);
CREATE INDEX task_blocks_blocker ON task_blocks (blocked_by_task_id);

CREATE TABLE task_chat_messages (
  id          TEXT PRIMARY KEY,
  task_id     TEXT NOT NULL REFERENCES tasks (id),
  author_type TEXT NOT NULL CHECK (author_type IN ('user', 'agent')),
  author_id   TEXT NOT NULL,
  body        TEXT NOT NULL,
  mentions    TEXT NOT NULL DEFAULT '[]',
  created_at  TEXT NOT NULL
);
CREATE INDEX task_chat_messages_task ON task_chat_messages (task_id, created_at);

-- Dispatches written in the transaction of the call that caused them, so they survive a
-- crash; the unique dedupe key makes a repeated cause a no-op instead of a second run.
CREATE TABLE jobs (
  id         TEXT PRIMARY KEY,
  tenant_id  TEXT NOT NULL REFERENCES tenants (id),
  kind       TEXT NOT NULL,
  payload    TEXT NOT NULL,
  dedupe_key TEXT NOT NULL UNIQUE,
  status     TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
  created_at TEXT NOT NULL
);
CREATE INDEX jobs_status ON jobs (status, created_at);
