-- The newest move of a branch still to make, which every git-writing call builds on
-- (tg_repo_tip): found among the few pending rows, not by walking the branch's whole history
-- of moves backwards.
CREATE INDEX repo_ref_moves_pending_branch ON repo_ref_moves (repo_id, branch, seq)
  WHERE applied_at IS NULL AND abandoned_at IS NULL;
