"""The commands that span the layers: ``run`` (the pipeline), ``status`` and ``verify``."""
