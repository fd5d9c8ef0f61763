-- What decides a principal's permissions and tool list (tg_principal_load, tg_tools_usable_key)
-- lives in these tables. Every change to it moves one counter, in the same transaction, so
-- that a process caching a principal or a list's fingerprint checks one row instead of
-- reading them all again; another process's change (the CLI revoking a grant) moves it too.
-- SQLite trigger syntax.
CREATE TABLE auth_epoch (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  n  INTEGER NOT NULL
);
INSERT INTO auth_epoch (id, n) VALUES (1, 0);

CREATE TRIGGER tenants_epoch_insert AFTER INSERT ON tenants
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER tenants_epoch_update AFTER UPDATE OF naming_profile ON tenants
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER tenants_epoch_delete AFTER DELETE ON tenants
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER principals_epoch_insert AFTER INSERT ON principals
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER principals_epoch_update AFTER UPDATE OF tenant_id, kind ON principals
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER principals_epoch_delete AFTER DELETE ON principals
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER users_epoch_insert AFTER INSERT ON users
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER users_epoch_update AFTER UPDATE OF tenant_id, principal_id, username, role ON users
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER users_epoch_delete AFTER DELETE ON users
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER agents_epoch_insert AFTER INSERT ON agents
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER agents_epoch_update AFTER UPDATE OF tenant_id, principal_id, slug, status, scope_type, scope_id ON agents
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER agents_epoch_delete AFTER DELETE ON agents
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER grants_epoch_insert AFTER INSERT ON grants
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER grants_epoch_update AFTER UPDATE OF principal_id, permission ON grants
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER grants_epoch_delete AFTER DELETE ON grants
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER tool_policies_epoch_insert AFTER INSERT ON tool_policies
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER tool_policies_epoch_update AFTER UPDATE OF tenant_id, tool_name, mode ON tool_policies
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
CREATE TRIGGER tool_policies_epoch_delete AFTER DELETE ON tool_policies
  BEGIN UPDATE auth_epoch SET n = n + 1; END;
