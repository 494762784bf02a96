-- 021: the word side's postings, folded (issue 26). Scope-wide, the word side read each word's
-- pieces through the word index, one heap row a piece: an 8-part message on an 80,000-piece
-- scope read about 150,000 rows from 80,000 heap pages (155 ms of its 197). Index maintenance
-- folds a scope's postings, one row a lexeme with its pieces' ids (pgmem.refresh_word_fold, a
-- row of pgmem.scope_index_plan); the word side reads those rows and the pieces written since
-- (the fold's tail) while the fold exists (a forget of one of its pieces deletes it), and reads
-- the word index otherwise, so the words and pieces are the same either way. New tables: no lock on
-- an existing one but the scope's foreign key (SHARE ROW EXCLUSIVE on pgmem.scope, briefly).
CREATE TABLE pgmem.word_fold_head (
    scope_id   text    NOT NULL REFERENCES pgmem.scope (scope_id) ON DELETE CASCADE,
    kind       text    NOT NULL CHECK (kind IN ('memory', 'document')),
    through    bigint  NOT NULL,
    pieces     bigint  NOT NULL,
    cap        bigint  NOT NULL,
    PRIMARY KEY (scope_id, kind)
);
COMMENT ON TABLE pgmem.word_fold_head IS
'One folded set of postings (pgmem.word_fold): the scope''s pieces of one kind with piece_id <= through, stored by index maintenance (pgmem.refresh_word_fold). Read by pgmem._word_postings (pgmem._word_fold) while it exists: no piece of the scope with a lower id than through commits after it (the refresh waits for the scope''s writers in flight), and a delete of one of its pieces deletes it (trigger piece_word_fold_on_delete).';
COMMENT ON COLUMN pgmem.word_fold_head.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.word_fold_head.kind IS 'The pieces'' kind: memory or document.';
COMMENT ON COLUMN pgmem.word_fold_head.through IS 'The fold''s last piece id (of any kind): it holds the pieces of this kind with piece_id <= through; later ones are its tail.';
COMMENT ON COLUMN pgmem.word_fold_head.pieces IS 'How many pieces of this kind it holds.';
COMMENT ON COLUMN pgmem.word_fold_head.cap IS 'Lexemes in more pieces than this have their count only (ids NULL): the most pieces a searched word may be in at the default share while the fold is read.';

CREATE TABLE pgmem.word_fold (
    scope_id text     NOT NULL,
    kind     text     NOT NULL,
    lexeme   text     NOT NULL,
    pieces   integer  NOT NULL,
    ids      bigint[],
    PRIMARY KEY (scope_id, kind, lexeme),
    FOREIGN KEY (scope_id, kind) REFERENCES pgmem.word_fold_head (scope_id, kind) ON DELETE CASCADE
);
COMMENT ON TABLE pgmem.word_fold IS
'The folded postings of a scope''s pieces of one kind up to its head''s through (pgmem.word_fold_head): one row a lexeme found in more than 128 of them, with the ids of the pieces holding it (a rarer one is read through the word index). Written by pgmem.refresh_word_fold, read by pgmem._word_postings; deleted with its head.';
COMMENT ON COLUMN pgmem.word_fold.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.word_fold.kind IS 'The pieces'' kind: memory or document.';
COMMENT ON COLUMN pgmem.word_fold.lexeme IS 'A lexeme of pgmem.piece_word.lexemes.';
COMMENT ON COLUMN pgmem.word_fold.pieces IS 'How many of the fold''s pieces hold it.';
COMMENT ON COLUMN pgmem.word_fold.ids IS 'Their piece ids, ascending; NULL when pieces is above the head''s cap (a word never searched while the fold is read).';
