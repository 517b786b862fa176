"""Partition replication as Kafka does it, sans-I/O: the leader's view of its followers, the
high watermark and the ISR (leader.py, replica.py), and the truncation protocol followers
use after a leader change (follower.py). The broker drives these with its logs, sockets,
clock and metadata store; the simulator and the tests drive them with none."""
