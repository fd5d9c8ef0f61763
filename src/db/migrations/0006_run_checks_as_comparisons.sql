-- Every tool call inserts an agent_runs row and an agent_run_logs row. SQLite (3.40) checks a
-- CHECK (x IN (...)) of more than two constants by building an ephemeral table of them on
-- every INSERT, a sizeable share of a call; the same constraint written as ORs of equalities
-- is a few comparisons and accepts exactly the same values (the column's TEXT affinity
-- applies to both forms, NULL passes both and NOT NULL refuses it).
--
-- SQLite-specific: the documented writable_schema procedure for changing a CHECK constraint
-- (lang_altertable.html, "Making Other Kinds Of Table Schema Changes"). Only the constraint's
-- text changes, so no stored row changes and every row already satisfies the new constraint.
-- A rebuild would copy every telemetry row and, agent_runs being referenced by foreign keys,
-- would need them off.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = CASE name
    WHEN 'agent_runs' THEN replace(sql,
      'status IN (''running'', ''completed'', ''failed'', ''cancelled'')',
      'status = ''running'' OR status = ''completed'' OR status = ''failed'''
        || ' OR status = ''cancelled''')
    ELSE replace(sql,
      'level IN (''INFO'', ''WARN'', ''ERROR'')',
      'level = ''INFO'' OR level = ''WARN'' OR level = ''ERROR''')
  END
  WHERE type = 'table' AND name IN ('agent_runs', 'agent_run_logs');
-- RESET also reloads this connection's schema; the next statement parses the new text, so a
-- bad edit fails this migration (and rolls it back) instead of reaching the file.
PRAGMA writable_schema = RESET;
-- Editing sqlite_schema leaves schema_version as it was, so other connections would keep the
-- old definitions. The procedure sets it to one more, a value plain SQL cannot compute; every
-- CREATE or DROP increments it.
CREATE VIEW schema_version_bump AS SELECT 1;
DROP VIEW schema_version_bump;
