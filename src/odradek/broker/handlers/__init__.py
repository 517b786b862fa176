"""One module per API family; importing this package registers them all."""

from . import api_versions, configs, describe_cluster, fetch, list_offsets, metadata, produce, topics  # noqa: F401
