-- A running task's tool (its canonical name) and the run its request named (NULL: none), so
-- that the audit row of its end that another server writes, when the one running it is
-- gone, names both as the rows of its calls do. The run is as the client gave it: the audit
-- row keeps it only when it names a running run of the task's agent (tg_call_log_end), as
-- the run gate does for a call. NULL in the rows of tasks begun before.
ALTER TABLE mcp_running_tasks ADD COLUMN tool TEXT;
ALTER TABLE mcp_running_tasks ADD COLUMN run_id TEXT;
