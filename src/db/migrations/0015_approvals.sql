-- A call held by the workspace tool policy for an approval (mode 'approval') asks for one:
-- a row bound to its caller, its tool and a digest of its exact arguments. A person granted
-- approvals.resolve, other than the caller, approves or denies it; the caller's next call with
-- the same arguments uses an approval once, in that call's own transaction.
CREATE TABLE approval_requests (
  id           TEXT PRIMARY KEY,
  tenant_id    TEXT NOT NULL REFERENCES tenants (id),
  principal_id TEXT NOT NULL REFERENCES principals (id),
  tool_name    TEXT NOT NULL,
  args_digest  TEXT NOT NULL,
  args         TEXT NOT NULL, -- whole, canonical JSON: what the approver is shown
  run_id       TEXT,
  status       TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used', 'expired')),
  created_at   TEXT NOT NULL,
  expires_at   TEXT NOT NULL, -- pending: until decided; approved: until used; denied: until asked again
  decided_by   TEXT REFERENCES principals (id),
  decided_at   TEXT,
  note         TEXT,
  used_at      TEXT
);

-- One live request per caller, tool and arguments: a call asked again finds it.
CREATE UNIQUE INDEX approval_requests_live ON approval_requests (principal_id, tool_name, args_digest)
  WHERE status IN ('pending', 'approved', 'denied');
CREATE INDEX approval_requests_by_tenant ON approval_requests (tenant_id, status, created_at);
