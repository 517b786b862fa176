"""Deterministic simulation of the real coordinator and client protocol cores under faults."""
