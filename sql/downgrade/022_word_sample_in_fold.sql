-- Undo 022: the samples leave the fold's head; pgmem.word_sample comes back empty (the word side
-- counts each sample itself until index maintenance stores it again).
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
ALTER TABLE pgmem.word_fold_head DROP COLUMN sample;
COMMENT ON TABLE pgmem.word_fold_head IS
'One folded set of postings (pgmem.word_fold): the scope''s pieces of one kind with piece_id <= through, stored by index maintenance (pgmem.refresh_word_fold). Read by pgmem._word_postings (pgmem._word_fold) while it exists: no piece of the scope with a lower id than through commits after it (the refresh waits for the scope''s writers in flight), and a delete of one of its pieces deletes it (trigger piece_word_fold_on_delete).';
