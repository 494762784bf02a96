"""Evaluation harness: suites that measure retrieval quality on development data."""
