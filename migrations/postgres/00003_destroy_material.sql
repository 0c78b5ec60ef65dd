-- Key-material destruction as a lifecycle action: a two-person approval may
-- now ask for "destroy" (and for "policy": switching the two-person rule
-- off needs two principals too), and a key version records when its private half
-- was destroyed (material_destroyed_at; the sealed blob of a software
-- version is dropped at the same time). The CHECK constraint on
-- approvals.action was created unnamed by 00002, so PostgreSQL named it
-- approvals_action_check; it is replaced under the same name.

-- +goose Up
ALTER TABLE approvals DROP CONSTRAINT approvals_action_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_action_check CHECK (action IN ('revoke', 'destroy', 'policy'));
ALTER TABLE key_versions ADD COLUMN material_destroyed_at timestamptz;
-- Display names ("token:ID(name)") of both principals, beside their ids.
ALTER TABLE approvals ADD COLUMN requested_by_name TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN decided_by_name TEXT;

-- +goose Down
-- A downgrade forgets destroy approvals (their audit rows stay) and when
-- material was destroyed; destroyed material does not come back.
ALTER TABLE key_versions DROP COLUMN material_destroyed_at;
ALTER TABLE approvals DROP COLUMN requested_by_name;
ALTER TABLE approvals DROP COLUMN decided_by_name;
DELETE FROM approvals WHERE action IN ('destroy', 'policy');
ALTER TABLE approvals DROP CONSTRAINT approvals_action_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_action_check CHECK (action IN ('revoke'));
