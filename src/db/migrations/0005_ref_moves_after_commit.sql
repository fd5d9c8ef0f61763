-- Branch moves happen after the call's transaction commits (DESIGN.md §7, src/git/git.h):
-- a recorded move may not have reached its branch yet, or may have lost it to a writer
-- outside toolgate. seq orders the moves of a repository (the latest move of a branch is the
-- one a new use of the repository finishes when a crash left it unapplied); abandoned_at
-- marks a move whose branch another writer took first, so nothing treats it as pending.
ALTER TABLE repo_ref_moves ADD COLUMN seq BIGINT;
ALTER TABLE repo_ref_moves ADD COLUMN abandoned_at TEXT;
UPDATE repo_ref_moves SET seq = (SELECT COUNT(*) FROM repo_ref_moves o
                                 WHERE o.repo_id = repo_ref_moves.repo_id AND o.id <= repo_ref_moves.id);
CREATE INDEX repo_ref_moves_branch ON repo_ref_moves (repo_id, branch, seq);
