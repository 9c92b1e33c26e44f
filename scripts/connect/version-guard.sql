-- Keeps a table of tidemark combined rows from ever going back to an older version.
--
-- The Debezium JDBC sink upserts with `INSERT … ON CONFLICT (primary key) DO UPDATE SET` every
-- column: the last record read wins, whatever its version. After a crash, tidemark replays from
-- its last commit and produces again rows the topic already holds, some older than the last one
-- published, so a plain upsert can step a row back for a moment (it ends right once the replay
-- has caught up). This trigger skips an update whose `version` is lower than the stored one: a
-- BEFORE UPDATE row trigger that returns NULL skips that row's update, also the one of
-- `ON CONFLICT DO UPDATE`. A lower version is always an older state of the same key (the
-- version is the sum of the partial versions, which only grow), so nothing newer is lost.
--
--   psql -v table=dashboard_combined -f scripts/connect/version-guard.sql
--
-- Run it once per table (after the table exists: created by the sink, `schema.evolution=basic`,
-- or beforehand); running it again replaces the trigger.

CREATE OR REPLACE FUNCTION tidemark_keep_newer_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.version < OLD.version THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS tidemark_keep_newer_version ON :"table";
CREATE TRIGGER tidemark_keep_newer_version
  BEFORE UPDATE ON :"table"
  FOR EACH ROW EXECUTE FUNCTION tidemark_keep_newer_version();
