"""The real components tests and benchmarks start on 127.0.0.1: importable by both, tests in none."""
