"""``python -m binlake.config > docs/configuration.md``: the configuration reference."""

from binlake.config.loading import reference

print(reference(), end="")
