-- How many calls of each tool succeeded in a run, for the tools that cap their successes per
-- run (maxPerRun): the cap reads its count here, where counting the run's telemetry rows took
-- as long as the run was (a session's run holds every call it made).
CREATE TABLE agent_run_successes (
  run_id TEXT NOT NULL REFERENCES agent_runs (id),
  step   TEXT NOT NULL,
  n      INTEGER NOT NULL,
  PRIMARY KEY (run_id, step)
);
-- Runs still running keep their count; which tools cap theirs is the catalog's, not the
-- database's, so every tool's successes are counted for them.
INSERT INTO agent_run_successes (run_id, step, n)
  SELECT run_id, step, COUNT(*) FROM agent_run_logs
  WHERE level = 'INFO' AND run_id IN (SELECT id FROM agent_runs WHERE status = 'running')
  GROUP BY run_id, step;
