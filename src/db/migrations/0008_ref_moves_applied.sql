-- A recorded move is applied once its branch holds it: the call's after-commit step marks
-- it, or a later use of the repository that finishes a move a crash left behind. Only moves
-- neither applied nor abandoned are pending, and only those a later use finishes, in order.
-- The branch log this replaces could not tell a move that never happened from one applied
-- and then undone by deleting the branch (which deletes its log too), and repositories made
-- before 0005 keep no log: a deleted or reset branch was taken back. Moves recorded before
-- this migration count as applied.
ALTER TABLE repo_ref_moves ADD COLUMN applied_at TEXT;
UPDATE repo_ref_moves SET applied_at = created_at WHERE abandoned_at IS NULL;
CREATE INDEX repo_ref_moves_pending ON repo_ref_moves (repo_id, seq)
  WHERE applied_at IS NULL AND abandoned_at IS NULL;
