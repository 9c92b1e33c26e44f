"""The benchmark harness: one implementation of everything the scenarios share (bench/README.md)."""
