"""Developer tools: run a stack's PyTorchJob on this machine and render its manifests offline."""
