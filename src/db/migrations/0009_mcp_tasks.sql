-- MCP tasks (the 2026-07-28 Tasks extension) that ended, each as tasks/get shows it: so that
-- its client reads how it ended for its whole time to live, even once the server that ran it
-- restarted or let it go from memory. A task still running lives in that server's memory, and
-- since migration 0010 also has a row in mcp_running_tasks.
CREATE TABLE mcp_tasks (
  id           TEXT PRIMARY KEY, -- 32 random hex digits
  principal_id TEXT NOT NULL REFERENCES principals (id),
  task         TEXT NOT NULL,    -- the DetailedTask, JSON
  ended_at     TEXT NOT NULL     -- ISO-8601 UTC, milliseconds; the row goes when its time to
                                 -- live is over (fixed width: text order is time order)
);
CREATE INDEX mcp_tasks_ended ON mcp_tasks (ended_at);
-- A principal's rows, newest first: past a bound per principal, the oldest go.
CREATE INDEX mcp_tasks_principal ON mcp_tasks (principal_id, ended_at);
