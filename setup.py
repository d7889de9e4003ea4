"""The optional compiled YAML reader (``_modelplane_yaml``, tasks/clients/cluster/yamlcompiled.c, linked to libyaml):
everything else about the package is in pyproject.toml.

``optional=True``: without a C compiler, Python's headers or libyaml's (Debian: gcc, python3-dev, libyaml-dev) the
install goes on without it, and manifests are read by the Python reader, with the same results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "_modelplane_yaml",
            sources=["tasks/clients/cluster/yamlcompiled.c"],
            libraries=["yaml"],
            optional=True,
        )
    ]
)
