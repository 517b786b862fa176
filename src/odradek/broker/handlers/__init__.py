"""One module per API family; importing this package registers them all."""

from . import (  # noqa: F401
    api_versions,
    classic_group,
    configs,
    consumer_group,
    describe_cluster,
    fetch,
    find_coordinator,
    groups,
    list_offsets,
    metadata,
    offsets,
    produce,
    producer_id,
    topics,
)
