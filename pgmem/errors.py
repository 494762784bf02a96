"""One error hierarchy for pgmem. Every error names what was wrong."""


class PgmemError(Exception):
    """Base class of every error pgmem raises on purpose."""


class ConfigError(PgmemError):
    """A setting (environment variable or argument) is missing or has an invalid value."""


class ModelFileError(PgmemError):
    """A local model file is missing or its sha256 differs from the pinned one."""


class ModelMismatchError(PgmemError):
    """The configured embedding model or dimension differs from the installed schema or scope."""


class EmbeddingError(PgmemError):
    """The embedding endpoint failed, refused a request, or returned an unusable response."""


class InputError(PgmemError):
    """Input (a turn, a message, a document) is malformed; the message names the field."""


class SchemaError(PgmemError):
    """The database has no pgmem schema, or an older one: run `pgmem migrate`."""


class ServerError(PgmemError):
    """The embedded Postgres server could not be started, found or stopped."""
