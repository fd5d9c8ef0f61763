-- A run a process holds open (a stdio server's session) names that process: its machine,
-- boot, pid and time namespaces, pid and start time (util/process_tag.h). The next server on
-- the machine (stdio or HTTP) ends as failed each one whose holder is gone (killed, crashed,
-- or from before a reboot), which nothing else would end. NULL for the runs no process holds.
ALTER TABLE agent_runs ADD COLUMN holder TEXT;
-- Only the few runs held open are in it: a call's own run, ended as it is written, is not.
CREATE INDEX agent_runs_held ON agent_runs (holder) WHERE status = 'running' AND holder IS NOT NULL;
