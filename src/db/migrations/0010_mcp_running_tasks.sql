-- MCP tasks still running, each written before its client learns its id and deleted in the
-- transaction that writes how it ended to mcp_tasks. runner names the server process that
-- runs it; that process holds a lock on the file task-runners/<runner>.lock in the data
-- directory while it lives. Another server that finds the lock free (the runner crashed or
-- was killed) writes such a task as failed instead of letting its client lose it.
CREATE TABLE mcp_running_tasks (
  id           TEXT PRIMARY KEY, -- 32 random hex digits, as in mcp_tasks
  principal_id TEXT NOT NULL REFERENCES principals (id),
  task         TEXT NOT NULL,    -- the DetailedTask as it began (working), JSON
  runner       TEXT NOT NULL     -- 32 random hex digits
);
CREATE INDEX mcp_running_tasks_runner ON mcp_running_tasks (runner);
