"""The floor every layer stands on: errors, the process runner, the ledger (and the SQLite handling it shares with
the index state, sqlite.py), hashing and atomic files, the settings, the output folder's Layout, data files
(resources.py names each, data.py loads them) and the standard-library ELF, fatbin and symbol readers. Imports
nothing else of wheelwright; the modules doctor.py carries are stdlib only."""
