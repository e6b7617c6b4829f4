"""The environment variable naming the deployment profiles ``import kerneltune`` imports.

A module of its own so that start-up reads it without importing the importer, which it
needs only when the variable names something.
"""

#: files or folders (``os.pathsep``-separated) that ``import kerneltune`` imports
ENVIRONMENT_VARIABLE = "KERNELTUNE_DEPLOYMENT_PROFILES"
