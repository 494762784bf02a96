-- Undo 021: the folded postings go; the word side reads every word through the word index again.
DROP TRIGGER IF EXISTS piece_word_fold_on_delete ON pgmem.piece;
DROP FUNCTION IF EXISTS pgmem._word_fold_forget();
DROP FUNCTION IF EXISTS pgmem.refresh_word_fold(text, text);
DROP FUNCTION IF EXISTS pgmem._word_fold(text, text);
DROP TABLE pgmem.word_fold;
DROP TABLE pgmem.word_fold_head;
