-- What giving up a recorded move takes back, written with the move by the call that made it:
-- JSON {"undo": statement or null, "params": its parameters, "activity": [activity_log ids]}.
-- The call's own after-commit step gives up its move with it, and so does a later use of the
-- repository that finds the move pending after that call's process died and its branch gone
-- elsewhere: the call's database changes are undone and its activity rows, which tell of a
-- commit its branch never took, are deleted. NULL: nothing to take back.
ALTER TABLE repo_ref_moves ADD COLUMN take_back TEXT;
