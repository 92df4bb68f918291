-- tests/sqlalchemy/setup.sql — one database for SQLAlchemy's test suite, as
-- its README.unittests.rst asks (UTF8, the hstore and citext extensions,
-- schemas test_schema and test_schema_2, English text search), run by
-- tests/sqlalchemy.sh in the hasis database and in the heap database alike,
-- so the two differ only in default_table_access_method (set by the script).
--
-- An event trigger checks every hasis table of the database with
-- pg_hybrid.verify_table() before each DROP TABLE / DROP SCHEMA: the suite
-- drops its tables after each test class, so this checks every table it made,
-- after all of its DML, while it still exists. A table that fails stops the
-- DROP with verify_table's error, which the suite then reports as an error
-- of that test (and the heap database has no hasis table to fail).
-- Tables another session holds locked (lock_timeout) or has just dropped
-- are skipped and counted in the log; other sessions' temporary tables are
-- not looked at (this session's are checked).
CREATE EXTENSION IF NOT EXISTS hstore;
CREATE EXTENSION IF NOT EXISTS citext;
CREATE SCHEMA test_schema;
CREATE SCHEMA test_schema_2;
CREATE SCHEMA ph_check;

CREATE FUNCTION ph_check.verify_hasis_tables() RETURNS event_trigger
LANGUAGE plpgsql SET lock_timeout = '2s' AS $$
DECLARE
    t regclass;
    n bigint;
BEGIN
    FOR t IN
        SELECT c.oid::regclass FROM pg_class c JOIN pg_am a ON a.oid = c.relam
        WHERE a.amname = 'hasis' AND c.relkind IN ('r', 'm')
          AND (c.relpersistence <> 't' OR c.relnamespace = pg_my_temp_schema())
    LOOP
        BEGIN
            n := pg_hybrid.verify_table(t);
            RAISE LOG 'ph_check: verify_table(%) = % versions, before %', t, n, tg_tag;
        EXCEPTION WHEN lock_not_available OR undefined_table THEN
            RAISE LOG 'ph_check: skipped % (%)', t, SQLERRM;
        END;
    END LOOP;
END $$;

CREATE EVENT TRIGGER ph_check_verify ON ddl_command_start
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP MATERIALIZED VIEW')
    EXECUTE FUNCTION ph_check.verify_hasis_tables();

-- The suite's login (its default URL names scott/tiger; trust auth here).
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'scott') THEN
        CREATE ROLE scott SUPERUSER LOGIN PASSWORD 'tiger';
    END IF;
END $$;
