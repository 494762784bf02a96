-- 019: the word side's sample, stored (issue 26). In a searched set of more than 1,000 pieces
-- every word is first counted in the set's first 1,000 pieces by id (pgmem._word_sample), and
-- a word common there is dropped unread. Counting it took most of a small scope's word side:
-- on a 2,000-piece scope, 14.1 ms for a one-part question against 4.4 ms with the counts stored
-- (docs/bench/word-sample.txt). Those counts
-- change only when one of those 1,000 pieces goes (later pieces have higher ids), so index
-- maintenance stores them (pgmem.refresh_word_sample, a row of pgmem.scope_index_plan) and
-- the word side reads them while they are still the first 1,000 pieces' (pgmem._word_sample_valid),
-- and counts them itself otherwise. A new table: no lock on an existing one but the scope's
-- foreign key (SHARE ROW EXCLUSIVE on pgmem.scope: a new scope's first write waits, briefly).
CREATE TABLE pgmem.word_sample (
    scope_id text    NOT NULL REFERENCES pgmem.scope (scope_id) ON DELETE CASCADE,
    kind     text    NOT NULL CHECK (kind IN ('memory', 'document')),
    through  bigint  NOT NULL,
    pieces   integer NOT NULL,
    id_sum   numeric NOT NULL,
    lexemes  text[]  NOT NULL,
    counts   integer[] NOT NULL CHECK (cardinality(counts) = cardinality(lexemes)),
    PRIMARY KEY (scope_id, kind)
);
COMMENT ON TABLE pgmem.word_sample IS
'The word side''s sample of a scope''s pieces of one kind, stored by index maintenance (pgmem.refresh_word_sample): the lexemes found in more than 3 of its first 1,000 pieces by id, with their counts. Read by pgmem._word_postings while it is still those pieces'' (pgmem._word_sample_valid).';
COMMENT ON COLUMN pgmem.word_sample.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.word_sample.kind IS 'The pieces'' kind: memory or document.';
COMMENT ON COLUMN pgmem.word_sample.through IS 'The sample''s last piece id: it is the pieces of this scope and kind with piece_id <= through.';
COMMENT ON COLUMN pgmem.word_sample.pieces IS 'How many pieces the sample held (1,000).';
COMMENT ON COLUMN pgmem.word_sample.id_sum IS 'The sum of their piece ids: with pieces, what tells whether the pieces up to through are still the same.';
COMMENT ON COLUMN pgmem.word_sample.lexemes IS 'The lexemes in more than 3 of the sample''s pieces, sorted (a lexeme absent is in 3 or fewer, which no share drops).';
COMMENT ON COLUMN pgmem.word_sample.counts IS 'In how many of the sample''s pieces each lexeme is (same order as lexemes).';
