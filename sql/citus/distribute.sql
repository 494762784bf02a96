-- Distribute pgmem by scope on Citus. NOT RUN HERE: Citus is not installable on the machine
-- this was written on; tests/test_citus_check.py checks the schema properties this relies on
-- (every primary key, unique constraint and foreign key includes scope_id; every function
-- that reads a scoped table is pinned to its scope argument). See sql/citus/README.md.
--
-- Run once on the coordinator, as the schema owner, right after `pgmem migrate` created the
-- schema there and before any data is written (distributing a filled table copies its rows).
-- Every node needs the vector extension (CREATE EXTENSION vector on the coordinator propagates
-- when Citus manages extensions; otherwise create it on each worker first).

CREATE EXTENSION IF NOT EXISTS citus;

BEGIN;

-- Reference tables: small, not scoped, copied to every node (foreign keys from distributed
-- tables to them are allowed).
SELECT create_reference_table('pgmem.embedding_model');
SELECT create_reference_table('pgmem.vector_column');
-- Per-model recall settings (read by the recall functions on every node).
SELECT create_reference_table('pgmem.model_setting');
-- The LangGraph store's namespace directory (names only). put_item writes it together with the
-- scope's store_item row, so put_item runs on the coordinator, not delegated to a shard.
SELECT create_reference_table('pgmem.store_namespace');
-- Forgotten scopes (hashes only, 0051): forget_scope writes it and put_item reads it, both on the
-- coordinator as above.
SELECT create_reference_table('pgmem.forgotten_scope');

-- Distributed tables, all co-located by scope_id: one scope's rows live on one shard, so every
-- join and foreign key between them (all include scope_id) stays on that shard.
SELECT create_distributed_table('pgmem.scope', 'scope_id');
SELECT create_distributed_table('pgmem.thread', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.turn', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.document', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.chunk', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.piece', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.piece_word', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.word_fold_head', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.word_fold', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.fact', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.recall_log', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.store_item', 'scope_id', colocate_with => 'pgmem.scope');
SELECT create_distributed_table('pgmem.store_tombstone', 'scope_id', colocate_with => 'pgmem.scope');

COMMIT;

-- Functions whose first argument is the scope: a call is sent whole to the node holding that
-- scope's shard and runs there (one round trip, every statement local to the shard).
SELECT create_distributed_function(
    'pgmem.memory_recall(text, vector[], text[], integer, double precision, text, text, integer, integer, boolean, integer)',
    'scope', colocate_with => 'pgmem.scope');
SELECT create_distributed_function(
    'pgmem.fact_recall(text, vector[], integer, double precision, text, boolean, integer)',
    'scope', colocate_with => 'pgmem.scope');
SELECT create_distributed_function(
    'pgmem.document_search(text, vector[], text[], integer, double precision, integer)',
    'scope', colocate_with => 'pgmem.scope');
SELECT create_distributed_function(
    'pgmem.explain_recall(text, vector[], text[], integer, double precision, text, integer)',
    'scope', colocate_with => 'pgmem.scope');
SELECT create_distributed_function(
    'pgmem.put_turn(text, text, integer, timestamp with time zone, jsonb, bytea, text, text[], integer[], text[], text[], vector[], double precision, boolean, boolean, vector)',
    'scope', colocate_with => 'pgmem.scope');
SELECT create_distributed_function(
    'pgmem.add_facts(text, text, text[], vector[], text[], integer[], text[])',
    'scope', colocate_with => 'pgmem.scope');
SELECT create_distributed_function(
    'pgmem.put_document(text, text, text, text, bytea, text, jsonb, text[], integer[], text[], integer[], integer[], integer[], text[], text[], vector[], double precision, boolean, boolean)',
    'scope', colocate_with => 'pgmem.scope');

-- Per-scope ANN indexes: pgmem.scope_index_plan() runs on the coordinator (it counts rows of
-- every shard); its CREATE INDEX statements on a distributed table are propagated to every
-- shard of the table (the index is empty on shards that do not hold the scope).
