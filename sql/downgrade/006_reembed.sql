-- Undo 006: a model change in progress loses its staged vectors (the serving ones are untouched).
DROP FUNCTION IF EXISTS pgmem.reembed_pending(text, text, integer, integer);
DROP FUNCTION IF EXISTS pgmem.stage_vectors(text, text, bigint[], @VECTOR_SCHEMA@.vector[]);
DROP FUNCTION IF EXISTS pgmem.reembed_flip(text, text, integer, double precision);
DROP FUNCTION IF EXISTS pgmem.reembed_status(text, text, integer);
DROP TABLE pgmem.staged_vector;
