-- A key's settings revision (ADR 0036); see the PostgreSQL migration.

-- +goose Up
ALTER TABLE keys ADD COLUMN settings_rev INTEGER NOT NULL DEFAULT 0 CHECK (settings_rev >= 0);

-- +goose Down
ALTER TABLE keys DROP COLUMN settings_rev;
