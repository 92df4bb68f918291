-- VACUUM marks rows visible to every snapshot of the database (moves them
-- into column parts, marks parts all-visible, freezes) only once no snapshot
-- older than them is left. An autovacuum ANALYZE of another table can hold
-- one for a while, so before such a VACUUM wait (up to 60 s) until no other
-- backend of this database (or of none) holds a snapshot or a transaction.
CREATE FUNCTION snapshots_gone() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    IF NOT EXISTS (SELECT 1 FROM pg_stat_activity
                   WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datname IS NULL)
                     AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)) THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.1);
  END LOOP;
  RETURN false;
END $$;
