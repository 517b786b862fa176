"""One module per API family; importing this package registers them all."""

from . import (  # noqa: F401
    api_versions,
    configs,
    describe_cluster,
    fetch,
    list_offsets,
    metadata,
    produce,
    producer_id,
    topics,
)
