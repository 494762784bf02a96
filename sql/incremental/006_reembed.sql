-- 006: vectors of a model change, staged beside the serving ones (issue 27).
--
-- `pgmem reembed --to MODEL` embeds every piece of a scope with the new model and writes the
-- unit vectors here while recall keeps serving the scope's current model from pgmem.piece.
-- pgmem.reembed_flip then swaps them in, in one transaction per scope, and empties the scope's
-- rows. A piece forgotten or replaced meanwhile takes its staged vector with it (cascade).

CREATE TABLE pgmem.staged_vector (
    scope_id      text NOT NULL,
    model_key     integer NOT NULL REFERENCES pgmem.embedding_model (model_key),
    piece_id      bigint NOT NULL,
    raw_embedding vector(@PIECE_DIMS@) NOT NULL,
    staged_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, model_key, piece_id),
    FOREIGN KEY (scope_id, piece_id) REFERENCES pgmem.piece (scope_id, piece_id) ON DELETE CASCADE
);
ALTER TABLE pgmem.staged_vector ALTER COLUMN raw_embedding SET STORAGE PLAIN;
-- The cascade from a deleted piece finds its staged rows by (scope_id, piece_id).
CREATE INDEX staged_vector_piece_idx ON pgmem.staged_vector (scope_id, piece_id);
COMMENT ON TABLE pgmem.staged_vector IS 'Piece vectors of a model change in progress (pgmem reembed), written beside the serving ones and swapped in by pgmem.reembed_flip, one transaction per scope.';
COMMENT ON COLUMN pgmem.staged_vector.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.staged_vector.model_key IS 'The model being changed to.';
COMMENT ON COLUMN pgmem.staged_vector.piece_id IS 'The piece the vector is for; deleting the piece deletes it.';
COMMENT ON COLUMN pgmem.staged_vector.raw_embedding IS 'Unit vector of the piece''s label and body under the new model (piece.raw_embedding after the flip).';
COMMENT ON COLUMN pgmem.staged_vector.staged_at IS 'When the vector was written.';
