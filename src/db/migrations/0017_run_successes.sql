-- What each tool of a run succeeded, as {"tool:NAME": count}, for the tools that cap their
-- successes per run (maxPerRun): the cap is read from the run's own row, where counting its
-- telemetry rows took as long as the run was (a session's run holds every call it made).
ALTER TABLE agent_runs ADD COLUMN successes TEXT;
-- Runs still running keep their count; which tools cap theirs is the catalog's, not the
-- database's, so every tool's successes are counted here.
UPDATE agent_runs SET successes = (
  SELECT json_group_object(step, n) FROM (
    SELECT step, COUNT(*) AS n FROM agent_run_logs
    WHERE run_id = agent_runs.id AND level = 'INFO' GROUP BY step))
WHERE status = 'running';
