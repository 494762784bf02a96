-- 022: the word side's sample moves into its fold's head (issue 26). The sample (the lexemes in
-- more than 3 of a set's first 1,000 pieces by id, with their counts) was its own table, stored
-- by its own maintenance call and checked on every hybrid recall against the set's first pieces
-- (pgmem._word_sample_valid: about 0.8 ms a call at any scope size), then unnested whole to find
-- a message's words in it. The fold's head already holds while no piece up to its last id is
-- deleted and no lower id commits later, which is what the sample needs: folded with the
-- postings (pgmem.refresh_word_fold), it is valid whenever the head exists, and nothing is
-- checked. It is a JSON object from lexeme to count, stored uncompressed (EXTERNAL), so that the
-- word side reads it once and looks each word up by key. Existing heads get their samples here
-- (the same counts refresh_word_fold stores: the head is valid, so its set's first 1,000 pieces
-- are still those it folded); pgmem.word_sample goes. Locks: ACCESS EXCLUSIVE on word_fold_head
-- for the column change and the update (the word side's readers wait, briefly), and on
-- word_sample to drop it.
ALTER TABLE pgmem.word_fold_head ADD COLUMN sample jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(sample) = 'object');
ALTER TABLE pgmem.word_fold_head ALTER COLUMN sample DROP DEFAULT, ALTER COLUMN sample SET STORAGE EXTERNAL;
COMMENT ON COLUMN pgmem.word_fold_head.sample IS
'The word side''s sample: each lexeme in more than 3 of the set''s first 1,000 pieces by id, with that count (a lexeme absent is in 3 or fewer, which no share drops). Uncompressed (EXTERNAL): read once by a recall, then looked up by key.';
UPDATE pgmem.word_fold_head h
   SET sample = s.sample
  FROM (SELECT h0.scope_id, h0.kind, coalesce(jsonb_object_agg(c.lex, c.c), '{}') AS sample
          FROM pgmem.word_fold_head h0
          LEFT JOIN LATERAL (
                SELECT x.lex, count(*)::integer AS c
                  FROM (SELECT p.lexemes FROM pgmem.piece_word p
                         WHERE p.scope_id = h0.scope_id AND p.kind = h0.kind
                         ORDER BY p.piece_id LIMIT 1000) f
                 CROSS JOIN LATERAL unnest(string_to_array(f.lexemes, ' ')) AS x(lex)
                 GROUP BY x.lex
                HAVING count(*) > 3) c ON true
         GROUP BY h0.scope_id, h0.kind) s
 WHERE h.scope_id = s.scope_id AND h.kind = s.kind;
COMMENT ON TABLE pgmem.word_fold_head IS
'One folded set of postings (pgmem.word_fold) and its sample: the scope''s pieces of one kind with piece_id <= through, stored by index maintenance (pgmem.refresh_word_fold). Read by pgmem._word_postings (pgmem._word_fold) while it exists: no piece of the scope with a lower id than through commits after it (the refresh waits for the scope''s writers in flight), and a delete of one of its pieces deletes it (trigger piece_word_fold_on_delete).';
DROP FUNCTION IF EXISTS pgmem.refresh_word_sample(text, text);
DROP FUNCTION IF EXISTS pgmem._word_sample_valid(text, text);
DROP TABLE pgmem.word_sample;
