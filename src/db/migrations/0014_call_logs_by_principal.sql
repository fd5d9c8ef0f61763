-- A user's calls belong to no run: they are found by their principal (admin.user.calls).
-- Partial, so that agents' calls, which the index would never serve, do not pay to keep it.
CREATE INDEX agent_run_logs_principal ON agent_run_logs (principal_id, created_at, id)
  WHERE run_id IS NULL;
