"""Unit tests: our own logic, fast; no network, no compiler, and an autouse fixture fails any subprocess call."""
