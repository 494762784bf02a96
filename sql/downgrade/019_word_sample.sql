-- Undo 019: the stored word samples go; the word side counts every sample itself again.
DROP FUNCTION IF EXISTS pgmem.refresh_word_sample(text, text);
DROP FUNCTION IF EXISTS pgmem._word_sample_valid(text, text);
DROP FUNCTION IF EXISTS pgmem._word_sample(text, text, text);
DROP TABLE pgmem.word_sample;
