-- 018: each piece's words without their positions (strip). Nothing reads a position: the word
-- side matches lexemes (the word index's keys, pgmem.scope_words, and the sample's
-- tsvector_to_array), so the same pieces are found and scored. The positions were a third of
-- the words: on a store of 156,000 pieces the word side (pgmem.piece_word and its indexes) went
-- from 26.1% to 18.1% of the piece table's size (docs/bench/100k-piece-word-2.txt,
-- 100k-default-mode-0026.txt).
-- No piece may be written meanwhile, so that every row of words is stripped when this commits
-- (a writer that planned its trigger's insert before would store positions): writers wait from
-- the start. The column's new expression rewrites pgmem.piece_word and rebuilds its indexes
-- (ACCESS EXCLUSIVE on it: the word side of recall waits too; 15 s for 156,000 pieces here).
-- The new rule for new pieces (pgmem.piece_tsv, sql/idempotent/020_ingest.sql) is applied in
-- this same transaction.
LOCK TABLE pgmem.piece IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE pgmem.piece_word ALTER COLUMN tsv TYPE tsvector USING strip(tsv);
COMMENT ON COLUMN pgmem.piece_word.tsv IS
'The lexemes (english configuration) of the piece''s label and body, without positions (pgmem.piece_tsv).';
