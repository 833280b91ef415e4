"""Kafka topics as a trib source: exactly once, recoverable from the table alone (docs/kafka.md)."""
