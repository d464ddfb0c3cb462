"""Expectations shared by the component tests."""

# pulumi.com/waitFor for `job.waitFor: running`: the job's Running condition, or Succeeded for a
# job that finished before the await saw it (or long before a later update).
RUNNING_OR_SUCCEEDED = (
    'jsonpath={.status.conditions[?(@.status=="True" && '
    '(@.type=="Running" || @.type=="Succeeded"))]}'
)
