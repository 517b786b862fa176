"""One module per API family; importing this package registers them all."""

from . import (  # noqa: F401
    api_versions,
    classic_group,
    alter_configs,
    configs,
    consumer_group,
    delete_records,
    describe_cluster,
    fetch,
    find_coordinator,
    groups,
    leader_epoch,
    list_offsets,
    metadata,
    offsets,
    produce,
    producer_id,
    topics,
    transactions,
    txn_offsets,
)
