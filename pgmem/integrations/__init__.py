"""Integrations with agent frameworks (optional extras; the core never imports them)."""
