-- 001: the pgmem schema, its tables and their indexes.
-- Placeholders @PIECE_DIMS@ and @FACT_DIMS@ are replaced by the migration with the
-- dimensions configured at install time; they are recorded in pgmem.vector_column.

CREATE SCHEMA IF NOT EXISTS pgmem;
-- pgvector lives in @VECTOR_SCHEMA@ (default public); every function pins it in search_path.
CREATE EXTENSION IF NOT EXISTS vector SCHEMA @VECTOR_SCHEMA@;
COMMENT ON SCHEMA pgmem IS 'pgmem: agent memory retrieval. Uninstall with DROP SCHEMA pgmem CASCADE.';

CREATE TABLE pgmem.vector_column (
    column_name text PRIMARY KEY,
    dims        integer NOT NULL CHECK (dims BETWEEN 1 AND 16000),
    installed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE pgmem.vector_column IS 'Dimension of every vector column, fixed at install time (a reference table: not scoped).';
COMMENT ON COLUMN pgmem.vector_column.column_name IS 'Qualified column, e.g. piece.embedding.';
COMMENT ON COLUMN pgmem.vector_column.dims IS 'Dimension the column was created with; an embedder of another dimension is refused.';
COMMENT ON COLUMN pgmem.vector_column.installed_at IS 'When the column was created.';
INSERT INTO pgmem.vector_column (column_name, dims) VALUES
    ('piece.embedding', @PIECE_DIMS@),
    ('fact.embedding', @FACT_DIMS@);

CREATE TABLE pgmem.embedding_model (
    model_key  smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_id   text NOT NULL CHECK (length(model_id) BETWEEN 1 AND 200),
    dims       integer NOT NULL CHECK (dims > 0),
    first_used timestamptz NOT NULL DEFAULT now(),
    UNIQUE (model_id, dims)
);
COMMENT ON TABLE pgmem.embedding_model IS 'Registry of embedding models (model id + dimension) that produced stored vectors (a reference table: not scoped).';
COMMENT ON COLUMN pgmem.embedding_model.model_key IS 'Short key stored on every vector row.';
COMMENT ON COLUMN pgmem.embedding_model.model_id IS 'Model identifier as the embedder reports it.';
COMMENT ON COLUMN pgmem.embedding_model.dims IS 'Dimension of the vectors this model produced here.';
COMMENT ON COLUMN pgmem.embedding_model.first_used IS 'When this model first stored a vector.';

CREATE TABLE pgmem.scope (
    scope_id        text PRIMARY KEY CHECK (length(scope_id) BETWEEN 1 AND 200),
    piece_model_key smallint REFERENCES pgmem.embedding_model (model_key),
    fact_model_key  smallint REFERENCES pgmem.embedding_model (model_key),
    created_at      timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE pgmem.scope IS 'A tenant of memory (a user, an agent): every other row belongs to exactly one scope.';
COMMENT ON COLUMN pgmem.scope.scope_id IS 'Caller-chosen scope name; the distribution key everywhere.';
COMMENT ON COLUMN pgmem.scope.piece_model_key IS 'Model of the scope''s piece vectors; another model is refused unless re-embedding.';
COMMENT ON COLUMN pgmem.scope.fact_model_key IS 'Model of the scope''s fact vectors.';
COMMENT ON COLUMN pgmem.scope.created_at IS 'When the scope was first written.';

CREATE TABLE pgmem.thread (
    scope_id   text NOT NULL REFERENCES pgmem.scope (scope_id) ON DELETE CASCADE,
    thread_id  text NOT NULL CHECK (length(thread_id) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, thread_id)
);
COMMENT ON TABLE pgmem.thread IS 'A conversation of an agent within a scope.';
COMMENT ON COLUMN pgmem.thread.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.thread.thread_id IS 'Caller-chosen thread name.';
COMMENT ON COLUMN pgmem.thread.created_at IS 'When the thread was first written.';

CREATE TABLE pgmem.turn (
    scope_id     text NOT NULL,
    thread_id    text NOT NULL,
    turn_index   integer NOT NULL CHECK (turn_index >= 0),
    turn_time    timestamptz,
    messages     jsonb NOT NULL CHECK (jsonb_typeof(messages) = 'array'),
    content_hash bytea NOT NULL,
    context      vector(@PIECE_DIMS@),
    blend_weight real NOT NULL DEFAULT 0.8 CHECK (blend_weight BETWEEN 0 AND 1),
    model_key    smallint REFERENCES pgmem.embedding_model (model_key),
    ingested_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, thread_id, turn_index),
    FOREIGN KEY (scope_id, thread_id) REFERENCES pgmem.thread (scope_id, thread_id) ON DELETE CASCADE
);
COMMENT ON TABLE pgmem.turn IS 'A sealed agent turn: its messages as sent, and the context vector its pieces are blended with.';
COMMENT ON COLUMN pgmem.turn.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.turn.thread_id IS 'Thread of the turn.';
COMMENT ON COLUMN pgmem.turn.turn_index IS 'Position of the turn in its thread (0-based); with scope and thread, the natural key.';
COMMENT ON COLUMN pgmem.turn.turn_time IS 'When the turn happened (shown in piece labels).';
COMMENT ON COLUMN pgmem.turn.messages IS 'The turn''s messages in OpenAI chat format, whole (tool results untruncated).';
COMMENT ON COLUMN pgmem.turn.content_hash IS 'sha256 of the turn content and piecing settings: an unchanged turn is skipped on re-ingest.';
COMMENT ON COLUMN pgmem.turn.context IS 'unit(mean of the turn''s unit piece vectors): the 20% side of the blend.';
COMMENT ON COLUMN pgmem.turn.blend_weight IS 'Weight w of the piece in its stored vector unit(w*piece + (1-w)*context).';
COMMENT ON COLUMN pgmem.turn.model_key IS 'Embedding model of the turn''s vectors.';
COMMENT ON COLUMN pgmem.turn.ingested_at IS 'When this version of the turn was stored.';

CREATE TABLE pgmem.document (
    scope_id     text NOT NULL REFERENCES pgmem.scope (scope_id) ON DELETE CASCADE,
    document_id  text NOT NULL CHECK (length(document_id) BETWEEN 1 AND 1000),
    title        text NOT NULL,
    body         text NOT NULL,
    content_hash bytea NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, document_id)
);
COMMENT ON TABLE pgmem.document IS 'A Markdown document, versioned by content hash.';
COMMENT ON COLUMN pgmem.document.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.document.document_id IS 'Caller-chosen id, usually the file path.';
COMMENT ON COLUMN pgmem.document.title IS 'First heading, or the id when there is none.';
COMMENT ON COLUMN pgmem.document.body IS 'The document text as added.';
COMMENT ON COLUMN pgmem.document.content_hash IS 'sha256 of body and chunking settings: re-adding an unchanged file writes nothing.';
COMMENT ON COLUMN pgmem.document.updated_at IS 'When this version was stored.';

CREATE TABLE pgmem.chunk (
    scope_id     text NOT NULL,
    chunk_id     bigint GENERATED ALWAYS AS IDENTITY,
    document_id  text NOT NULL,
    ordinal      integer NOT NULL CHECK (ordinal >= 0),
    heading_path text[] NOT NULL,
    body         text NOT NULL,
    PRIMARY KEY (scope_id, chunk_id),
    UNIQUE (scope_id, document_id, ordinal),
    FOREIGN KEY (scope_id, document_id) REFERENCES pgmem.document (scope_id, document_id) ON DELETE CASCADE
);
COMMENT ON TABLE pgmem.chunk IS 'A heading section of a document: what document search returns whole.';
COMMENT ON COLUMN pgmem.chunk.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.chunk.chunk_id IS 'Identity of the chunk.';
COMMENT ON COLUMN pgmem.chunk.document_id IS 'Document the chunk belongs to.';
COMMENT ON COLUMN pgmem.chunk.ordinal IS 'Position of the chunk in its document.';
COMMENT ON COLUMN pgmem.chunk.heading_path IS 'Headings from the title down to this section (Title > Section > Subsection).';
COMMENT ON COLUMN pgmem.chunk.body IS 'Section text, heading line included; unit spans index into it.';

CREATE TABLE pgmem.piece (
    scope_id      text NOT NULL,
    piece_id      bigint GENERATED ALWAYS AS IDENTITY,
    kind          text NOT NULL CHECK (kind IN ('memory', 'document')),
    unit_kind     text NOT NULL CHECK (unit_kind IN ('user', 'assistant', 'tool', 'system', 'heading', 'prose', 'code', 'list', 'transclusion', 'chunk')),
    thread_id     text,
    turn_index    integer,
    source_index  integer NOT NULL DEFAULT 0,
    seq           integer NOT NULL DEFAULT 0,
    chunk_id      bigint,
    span_start    integer,
    span_end      integer,
    label         text NOT NULL,
    body          text NOT NULL,
    raw_embedding vector(@PIECE_DIMS@) NOT NULL,
    embedding     vector(@PIECE_DIMS@) NOT NULL,
    model_key     smallint NOT NULL REFERENCES pgmem.embedding_model (model_key),
    tsv           tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, label || ' ' || body)) STORED,
    PRIMARY KEY (scope_id, piece_id),
    CHECK ((kind = 'memory') = (turn_index IS NOT NULL AND thread_id IS NOT NULL)),
    CHECK ((kind = 'document') = (chunk_id IS NOT NULL)),
    FOREIGN KEY (scope_id, thread_id, turn_index) REFERENCES pgmem.turn (scope_id, thread_id, turn_index) ON DELETE CASCADE,
    FOREIGN KEY (scope_id, chunk_id) REFERENCES pgmem.chunk (scope_id, chunk_id) ON DELETE CASCADE
);
ALTER TABLE pgmem.piece ALTER COLUMN raw_embedding SET STORAGE PLAIN;
ALTER TABLE pgmem.piece ALTER COLUMN embedding SET STORAGE PLAIN;
COMMENT ON TABLE pgmem.piece IS 'The per-scope vector plane: memory pieces (kind memory) and document search units (kind document).';
COMMENT ON COLUMN pgmem.piece.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.piece.piece_id IS 'Identity of the piece.';
COMMENT ON COLUMN pgmem.piece.kind IS 'memory (from a turn) or document (a unit of a chunk); memory_recall reads memory only.';
COMMENT ON COLUMN pgmem.piece.unit_kind IS 'Source of a memory piece (user, assistant, tool, system) or kind of a document unit (heading, prose, code, list, transclusion, chunk).';
COMMENT ON COLUMN pgmem.piece.thread_id IS 'Thread of a memory piece.';
COMMENT ON COLUMN pgmem.piece.turn_index IS 'Turn of a memory piece.';
COMMENT ON COLUMN pgmem.piece.source_index IS 'Position of the piece''s source in its turn (or unit in its chunk).';
COMMENT ON COLUMN pgmem.piece.seq IS 'Position of the piece within its source.';
COMMENT ON COLUMN pgmem.piece.chunk_id IS 'Chunk of a document unit.';
COMMENT ON COLUMN pgmem.piece.span_start IS 'Start (characters) of a document unit within its chunk body.';
COMMENT ON COLUMN pgmem.piece.span_end IS 'End (characters, exclusive) of a document unit within its chunk body.';
COMMENT ON COLUMN pgmem.piece.label IS 'Label embedded with the piece, e.g. [Turn 4 · Tool logistics_export · Oct 16, 2:02 PM].';
COMMENT ON COLUMN pgmem.piece.body IS 'Text of the piece without its label.';
COMMENT ON COLUMN pgmem.piece.raw_embedding IS 'Unit vector of label + body alone, kept so the blend can be redone in SQL.';
COMMENT ON COLUMN pgmem.piece.embedding IS 'Search vector: pgmem.blend(raw_embedding, turn context, weight).';
COMMENT ON COLUMN pgmem.piece.model_key IS 'Embedding model of the vectors.';
COMMENT ON COLUMN pgmem.piece.tsv IS 'Full-text vector (english configuration) for word search.';

CREATE INDEX piece_scope_kind_idx ON pgmem.piece (scope_id, kind, thread_id);
CREATE INDEX piece_turn_idx ON pgmem.piece (scope_id, thread_id, turn_index);
CREATE INDEX piece_chunk_idx ON pgmem.piece (scope_id, chunk_id) WHERE chunk_id IS NOT NULL;
CREATE INDEX piece_tsv_idx ON pgmem.piece USING gin (tsv);

CREATE TABLE pgmem.fact (
    scope_id   text NOT NULL REFERENCES pgmem.scope (scope_id) ON DELETE CASCADE,
    fact_id    bigint GENERATED ALWAYS AS IDENTITY,
    thread_id  text,
    turn_index integer,
    section    text,
    body       text NOT NULL CHECK (length(body) > 0),
    embedding  halfvec(@FACT_DIMS@) NOT NULL,
    model_key  smallint NOT NULL REFERENCES pgmem.embedding_model (model_key),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, fact_id)
);
ALTER TABLE pgmem.fact ALTER COLUMN embedding SET STORAGE PLAIN;
COMMENT ON TABLE pgmem.fact IS 'Short sentences about what happened in a turn or section: the second search plane.';
COMMENT ON COLUMN pgmem.fact.scope_id IS 'Owning scope.';
COMMENT ON COLUMN pgmem.fact.fact_id IS 'Identity of the fact.';
COMMENT ON COLUMN pgmem.fact.thread_id IS 'Thread the fact describes, if any.';
COMMENT ON COLUMN pgmem.fact.turn_index IS 'Turn the fact describes, if any.';
COMMENT ON COLUMN pgmem.fact.section IS 'Free-form section reference (e.g. a document chunk) the fact describes.';
COMMENT ON COLUMN pgmem.fact.body IS 'The fact sentence.';
COMMENT ON COLUMN pgmem.fact.embedding IS 'Unit vector of the sentence, at the fact plane''s own dimension, stored as halfvec (2 bytes a dimension: a 1,024-d row fits three to a page instead of one; docs/scaling.md).';
COMMENT ON COLUMN pgmem.fact.model_key IS 'Embedding model of the vector.';
COMMENT ON COLUMN pgmem.fact.created_at IS 'When the fact was stored.';
CREATE INDEX fact_scope_idx ON pgmem.fact (scope_id);

CREATE TABLE pgmem.recall_log (
    scope_id     text NOT NULL,
    recall_id    bigint GENERATED ALWAYS AS IDENTITY,
    created_at   timestamptz NOT NULL DEFAULT now(),
    plane        text NOT NULL CHECK (plane IN ('memory', 'fact', 'document')),
    message      text,
    part_texts   text[] NOT NULL,
    part_vectors vector[] NOT NULL,
    x            integer NOT NULL,
    floor        double precision NOT NULL,
    thread_id    text,
    mode         text NOT NULL,
    results      jsonb NOT NULL,
    PRIMARY KEY (scope_id, recall_id)
);
COMMENT ON TABLE pgmem.recall_log IS 'Optional log of recall requests (parts, blended vectors, settings, results) so a past recall can be explained or replayed from psql.';
COMMENT ON COLUMN pgmem.recall_log.scope_id IS 'Scope searched.';
COMMENT ON COLUMN pgmem.recall_log.recall_id IS 'Identity of the logged recall.';
COMMENT ON COLUMN pgmem.recall_log.created_at IS 'When the recall ran.';
COMMENT ON COLUMN pgmem.recall_log.plane IS 'memory, fact or document.';
COMMENT ON COLUMN pgmem.recall_log.message IS 'The whole incoming message.';
COMMENT ON COLUMN pgmem.recall_log.part_texts IS 'Its parts, in order.';
COMMENT ON COLUMN pgmem.recall_log.part_vectors IS 'The blended query vector of each part.';
COMMENT ON COLUMN pgmem.recall_log.x IS 'Hits kept per part.';
COMMENT ON COLUMN pgmem.recall_log.floor IS 'Cosine floor used.';
COMMENT ON COLUMN pgmem.recall_log.thread_id IS 'Thread filter, if any.';
COMMENT ON COLUMN pgmem.recall_log.mode IS 'vector or hybrid.';
COMMENT ON COLUMN pgmem.recall_log.results IS 'The hits returned, as JSON.';

CREATE TYPE pgmem.recall_hit AS (
    part_no     integer,
    rank        integer,
    piece_id    bigint,
    thread_id   text,
    turn_index  integer,
    label       text,
    body        text,
    cosine      double precision,
    score       double precision,
    word_rank   integer
);
COMMENT ON TYPE pgmem.recall_hit IS 'One hit of memory_recall: part (1-based), rank in its part, the piece, raw cosine, (1+cosine)/2 score, and its word-search rank (NULL when not a word hit).';

CREATE TYPE pgmem.fact_hit AS (
    part_no    integer,
    rank       integer,
    fact_id    bigint,
    thread_id  text,
    turn_index integer,
    section    text,
    body       text,
    cosine     double precision,
    score      double precision
);
COMMENT ON TYPE pgmem.fact_hit IS 'One hit of fact_recall: part, rank in its part, the fact, raw cosine and (1+cosine)/2 score.';

CREATE TYPE pgmem.put_result AS (
    status      text,
    pieces      integer
);
COMMENT ON TYPE pgmem.put_result IS 'Outcome of put_turn: status (inserted, replaced, unchanged) and the number of pieces written.';

CREATE TYPE pgmem.document_hit AS (
    part_no      integer,
    rank         integer,
    chunk_id     bigint,
    document_id  text,
    heading_path text[],
    chunk_body   text,
    piece_id     bigint,
    unit_kind    text,
    span_start   integer,
    span_end     integer,
    cosine       double precision,
    score        double precision
);
COMMENT ON TYPE pgmem.document_hit IS 'One hit of document_search: part (1-based), rank in its part, the whole chunk (once per part), and the best-matching unit: its piece, kind and character span [span_start, span_end) in chunk_body, raw cosine and (1+cosine)/2 score.';
