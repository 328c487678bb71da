"""Pure data, no code: torch facts, GPU archs, toolkits, images, platforms, recipes and repair lists as TOML, read only
through builder.core.data.load_data (each file named once in builder.core.resources) and checked at load time."""
