-- The scope guard of the write functions. Re-runnable. Applied first: later files call it.

CREATE OR REPLACE FUNCTION pgmem._write_scope(scope text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    current text := nullif(current_setting('pgmem.scope', true), '');
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF current IS NULL THEN
        -- A superuser (or BYPASSRLS) session is not confined by row-level security anyway;
        -- letting it write without SET LOCAL keeps psql maintenance simple. Anyone else must
        -- name the scope of the transaction first.
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = session_user AND (r.rolsuper OR r.rolbypassrls)) THEN
            RETURN scope;
        END IF;
        RAISE EXCEPTION 'no scope is set for this transaction (writing into scope %)', scope
            USING ERRCODE = '42501',
                  HINT = 'Call inside pgmem.db.scoped(conn, scope), or run SET LOCAL pgmem.scope = ''...'' in the same transaction.';
    END IF;
    IF current <> scope THEN
        RAISE EXCEPTION 'cannot write into scope %: this transaction''s scope is %', scope, current
            USING ERRCODE = '42501', HINT = 'A transaction reads and writes one scope: the one in pgmem.scope.';
    END IF;
    RETURN scope;
END
$$;
COMMENT ON FUNCTION pgmem._write_scope(text) IS
'Write functions call set_config(''pgmem.scope'', pgmem._write_scope(scope), true) first: it returns scope when it is the transaction''s pgmem.scope, raises 42501 when another scope (or, outside a superuser session, no scope) is set.';
