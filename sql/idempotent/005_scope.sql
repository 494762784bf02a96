-- The scope guard of the write functions. Re-runnable. Applied first: later files call it.

-- One check for reads and writes: the scope a function is asked for must be the transaction's
-- pgmem.scope. Row-level security enforces it underneath; this makes the mistake loud (a read
-- in the wrong scope would otherwise return nothing, a write fail on a policy). Public, so the
-- SECURITY INVOKER read functions can call it as pgmem_app or pgmem_reader.
CREATE OR REPLACE FUNCTION pgmem.check_scope(scope text, writing boolean DEFAULT false)
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
        -- letting it read and write without SET LOCAL keeps psql maintenance simple. Anyone
        -- else must name the scope of the transaction first.
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = session_user AND (r.rolsuper OR r.rolbypassrls)) THEN
            RETURN scope;
        END IF;
        IF coalesce(writing, false) THEN
            RAISE EXCEPTION 'no scope is set for this transaction (writing into scope %)', scope
                USING ERRCODE = '42501',
                      HINT = 'Call inside pgmem.db.scoped(conn, scope), or run SET LOCAL pgmem.scope = ''...'' in the same transaction.';
        END IF;
        RAISE EXCEPTION 'no scope is set for this transaction (reading scope %): under row-level security it would see nothing', scope
            USING ERRCODE = '42501',
                  HINT = 'Run SET LOCAL pgmem.scope = ''<scope>'' in the same transaction first (pgmem.db.scoped(conn, scope) does it).';
    END IF;
    IF current <> scope THEN
        IF coalesce(writing, false) THEN
            RAISE EXCEPTION 'cannot write into scope %: this transaction''s scope is %', scope, current
                USING ERRCODE = '42501', HINT = 'A transaction reads and writes one scope: the one in pgmem.scope.';
        END IF;
        RAISE EXCEPTION 'cannot read scope %: this transaction''s scope is %', scope, current
            USING ERRCODE = '42501',
                  HINT = 'A transaction reads and writes one scope: run SET LOCAL pgmem.scope = ''<scope>'' for the scope you read (pgmem.db.scoped(conn, scope)).';
    END IF;
    RETURN scope;
END
$$;
COMMENT ON FUNCTION pgmem.check_scope(text, boolean) IS
'Returns scope when it is the transaction''s pgmem.scope (or when no scope is set in a superuser or BYPASSRLS session); raises 42501 otherwise, with a hint naming SET LOCAL pgmem.scope. The read functions call it (through check_recall_args); writing => true is the write guard (pgmem._write_scope). Row-level security stays the enforcement underneath.';

CREATE OR REPLACE FUNCTION pgmem._write_scope(scope text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT pgmem.check_scope(scope, true)
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

-- The one rule of an array argument whose entry i goes with entry i of the others (put_item's
-- namespace, add_facts', put_document's): a list indexed from 1. An array with other bounds or
-- more dimensions was checked by position while stored in order (0047, 0052, 0053).
CREATE OR REPLACE FUNCTION pgmem._not_a_list(a anyarray)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT coalesce(array_ndims(a) > 1 OR array_lower(a, 1) <> 1, false)
$$;
COMMENT ON FUNCTION pgmem._not_a_list(anyarray) IS
'Internal to the write functions: whether an array argument is not a one-dimensional list indexed from 1 (false for NULL and for an empty array).';

-- Blank: empty or only whitespace, whitespace as Python's str.isspace has it (what check_name's
-- value.strip() removes), whatever the database's locale. The one definition of the rule SQL and
-- Python share for scope, thread and document names (and fact bodies): a name must hold some text
-- (0091).
CREATE OR REPLACE FUNCTION pgmem._blank(t text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
RETURN t !~ '[^\t\n\v\f\r \x1c-\x1f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]';
COMMENT ON FUNCTION pgmem._blank(text) IS
'Whether a text is empty or only whitespace (Python''s str.isspace characters): a scope, thread or document name, or a fact body, must not be (0091). NULL for NULL.';

-- The name of a scope a write creates or writes into: 1 to 200 characters, not blank (Python's
-- check_name). The scope table checks only the length (a 23514 naming a constraint); a blank
-- scope stored through SQL could not be read, written or forgotten through Python, which refuses
-- its name first (0091). Called by the functions that write a scope's rows (put_turns, add_facts,
-- put_document, bind_scope_model, open_scope, put_item, set_retention, log_recall); the forget
-- functions and the reads take any name.
CREATE OR REPLACE FUNCTION pgmem._check_scope_name(scope text, caller text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF char_length(scope) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION '%: scope must be 1 to 200 characters, got %', caller, char_length(scope) USING ERRCODE = '22023';
    ELSIF pgmem._blank(scope) THEN
        RAISE EXCEPTION '%: scope must be a non-empty string, got only whitespace', caller USING ERRCODE = '22023',
            HINT = 'A scope name needs a character that is not whitespace.';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._check_scope_name(text, text) IS
'Internal to the write functions (0091): raises 22023 (prefixed with caller) unless scope is 1 to 200 characters and not only whitespace, the rule of Python''s check_name.';
