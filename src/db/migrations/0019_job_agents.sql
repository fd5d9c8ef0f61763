-- The agent a job wakes, so that pausing or archiving it withdraws the jobs it had queued: a
-- start queued while it was active must not wake it later (seed 000: a paused or archived
-- agent does not resume by itself). NULL in the jobs queued before.
ALTER TABLE jobs ADD COLUMN agent_id TEXT;
CREATE INDEX jobs_agent ON jobs (agent_id, status);
