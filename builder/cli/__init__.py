"""The command line: the one room that composes the build (builder.farm and below) with the index (index_site).

Only this package imports index_site (pyproject.toml's import contracts); it parses arguments, calls one stage per
subcommand and owns all console output."""
