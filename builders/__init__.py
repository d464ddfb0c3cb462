"""The pure builders: settings (plain values or Pulumi Inputs) in, Kubernetes manifests (dicts)
out, no Pulumi resources. The shared ones (`manifests`), one module per job API (`job_apis/`),
then which objects a stack has (`stack_objects`). The Pulumi components, the offline render and
the local run build from the same functions.
"""
