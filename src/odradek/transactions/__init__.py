"""The transaction coordinator (KIP-98): transactional ids, producer epochs and the
two-phase end of a transaction, on `__transaction_state`. Sans-I/O: the broker drives it
(broker/txn_coordinator.py)."""
