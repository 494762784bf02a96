"""`pgmem bench`: a synthetic store at a chosen size, loaded through pgmem's own SQL ingest
functions with precomputed vectors, then recall latency and recall against exact search per
scope-size bucket. A benchmark measures; the tests assert behaviour."""
