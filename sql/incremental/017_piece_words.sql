-- 017: the word index moves to its own table, pgmem.piece_word (issue 26). Row-level security
-- applies its policy before any condition whose operator is not leakproof, and no GIN operator
-- is (arraycontains, ts_match_vq): under RLS the word index on pgmem.piece could not be used, so
-- each word read every piece of the scope and rebuilt its keys. On a 2,000-piece scope an
-- 8-part message's word side took 22.9 s as a login of pgmem_app against 0.17 s as a superuser
-- (docs/bench/word-side-roles.txt). pgmem.piece_word holds each piece's words (tsv, moved here from
-- pgmem.piece) and the index on them; its row-level security is enabled but not forced, so
-- pgmem._word_postings (SECURITY DEFINER, owned by pgmem_owner, checks its scope) reads the
-- index, while any other role reading the table directly sees its own scope only.
-- No piece may be written while the words are copied (one written meanwhile would have none):
-- writers wait for this migration's commit, readers go on until the drops at the end. The
-- trigger that writes every new piece's words (pgmem._piece_words, sql/idempotent) is created
-- by the re-runnable set in this same transaction.
LOCK TABLE pgmem.piece IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE pgmem.piece_word (
    scope_id  text   NOT NULL,
    piece_id  bigint NOT NULL,
    scope_no  bigint NOT NULL,
    kind      text   NOT NULL,
    thread_id text,
    tsv       tsvector NOT NULL,
    PRIMARY KEY (scope_id, piece_id),
    FOREIGN KEY (scope_id, piece_id) REFERENCES pgmem.piece (scope_id, piece_id) ON DELETE CASCADE
);
COMMENT ON TABLE pgmem.piece_word IS
'The words of each piece (memory and document units), written by the piece''s insert (trigger piece_words_on_insert) and deleted with it (foreign key, cascade): what the word side of hybrid recall and document search reads (pgmem._word_postings), through piece_word_words_idx.';
COMMENT ON COLUMN pgmem.piece_word.scope_id IS 'Owning scope (the piece''s).';
COMMENT ON COLUMN pgmem.piece_word.piece_id IS 'The piece.';
COMMENT ON COLUMN pgmem.piece_word.scope_no IS 'The scope''s number (pgmem.scope.scope_no), the word index''s key prefix.';
COMMENT ON COLUMN pgmem.piece_word.kind IS 'The piece''s kind: memory or document.';
COMMENT ON COLUMN pgmem.piece_word.thread_id IS 'The thread of a memory piece (a word search within a thread).';
COMMENT ON COLUMN pgmem.piece_word.tsv IS 'Full-text vector (english configuration) of the piece''s label and body.';

-- The copy must see every scope's pieces: a login member of pgmem_owner does while
-- pgmem.maintenance is on (the maintenance_read policy, 050_security.sql); a superuser always.
SELECT pg_catalog.set_config('pgmem.maintenance', 'on', true);
INSERT INTO pgmem.piece_word (scope_id, piece_id, scope_no, kind, thread_id, tsv)
SELECT p.scope_id, p.piece_id, p.scope_no, p.kind, p.thread_id, p.tsv FROM pgmem.piece p;
SELECT pg_catalog.set_config('pgmem.maintenance', '', true);

CREATE INDEX piece_word_words_idx ON pgmem.piece_word USING gin (pgmem.scope_words(scope_no, kind, tsv));
COMMENT ON INDEX pgmem.piece_word_words_idx IS
'Word index keyed by scope, kind and lexeme (pgmem.scope_words): the postings the word side reads (pgmem._word_postings).';

-- The searched set's size, counted index-only (pgmem._word_postings runs as the owner, whom
-- pgmem.piece's forced policy shows nothing without a scope set: it counts here).
CREATE INDEX piece_word_scope_kind_idx ON pgmem.piece_word (scope_id, kind, thread_id);

DROP INDEX pgmem.piece_scope_words_idx;
ALTER TABLE pgmem.piece DROP COLUMN tsv;
