"""Build orchestration: runs a plan's jobs through the steps, locally or in a builder container (engine, images),
records each in the ledger and merges shards' outputs. Imports steps, doctor, plan and core; never index_site (only
builder.cli composes the two)."""
