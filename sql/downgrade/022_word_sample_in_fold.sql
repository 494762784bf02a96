-- Undo 022: the samples leave the fold's head; pgmem.word_sample comes back empty (the word side
-- counts each sample itself until index maintenance stores it again): the migration's downgrade
-- then runs 019_word_sample.sql again, which creates it.
ALTER TABLE pgmem.word_fold_head DROP COLUMN sample;
COMMENT ON TABLE pgmem.word_fold_head IS
'One folded set of postings (pgmem.word_fold): the scope''s pieces of one kind with piece_id <= through, stored by index maintenance (pgmem.refresh_word_fold). Read by pgmem._word_postings (pgmem._word_fold) while it exists: no piece of the scope with a lower id than through commits after it (the refresh waits for the scope''s writers in flight), and a delete of one of its pieces deletes it (trigger piece_word_fold_on_delete).';
