"""The component provider: serves TrainingEnvironment to Pulumi programs in other languages.

The language host runs this directory's program as the plugin; Pulumi's component provider
host infers the package schema (`pulumi package get-schema provider`) from the component's
typed arguments and outputs, and constructs it when a program declares one.
"""

from importlib import metadata

from pulumi.provider.experimental import component_provider_host

from components.training_environment import TrainingEnvironment

# The package name is the component's type token's: pytorch-distributed:index:TrainingEnvironment.
PACKAGE = "pytorch-distributed"

if __name__ == "__main__":
    # The installed package's version (pyproject.toml), which the generated SDKs carry.
    component_provider_host(
        name=PACKAGE, components=[TrainingEnvironment], version=metadata.version(PACKAGE)
    )
