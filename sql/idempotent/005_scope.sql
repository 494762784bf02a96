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

CREATE OR REPLACE FUNCTION pgmem.scope_no(scope text)
RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT s.scope_no FROM pgmem.scope s WHERE s.scope_id = scope_no.scope
$$;
COMMENT ON FUNCTION pgmem.scope_no(text) IS
'The surrogate number of a scope (NULL when the scope does not exist or is not this transaction''s scope): per-scope partial indexes are keyed on it, and the recall functions add scope_no = <number> so the planner can use them.';

-- piece.scope_no and fact.scope_no are filled here, whoever inserts (the write functions, a
-- superuser in psql, a bulk load), so the number can never disagree with the scope.
CREATE OR REPLACE FUNCTION pgmem._set_scope_no()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    NEW.scope_no := pgmem.scope_no(NEW.scope_id);
    IF NEW.scope_no IS NULL THEN
        RAISE EXCEPTION 'scope % has no row in pgmem.scope (or is not this transaction''s scope)', NEW.scope_id
            USING ERRCODE = '23503', HINT = 'Write through the pgmem functions, which create the scope first.';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION pgmem._set_scope_no() IS
'Trigger: copies the scope''s number (pgmem.scope.scope_no) onto each new piece and fact row.';

CREATE OR REPLACE TRIGGER scope_no_on_insert BEFORE INSERT ON pgmem.piece
    FOR EACH ROW EXECUTE FUNCTION pgmem._set_scope_no();
CREATE OR REPLACE TRIGGER scope_no_on_insert BEFORE INSERT ON pgmem.fact
    FOR EACH ROW EXECUTE FUNCTION pgmem._set_scope_no();
COMMENT ON TRIGGER scope_no_on_insert ON pgmem.piece IS 'Sets scope_no from the scope (pgmem._set_scope_no).';
COMMENT ON TRIGGER scope_no_on_insert ON pgmem.fact IS 'Sets scope_no from the scope (pgmem._set_scope_no).';
