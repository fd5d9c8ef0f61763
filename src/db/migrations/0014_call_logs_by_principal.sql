-- A user's calls belong to no run: they are found by their principal (admin.user.calls).
CREATE INDEX agent_run_logs_principal ON agent_run_logs (principal_id, created_at, id);
