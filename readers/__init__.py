"""The cluster readers: what a job's and its queue's objects on the cluster say (`conditions`,
`queue_state`, `job_state`) and the watch that reads them through the Kubernetes API
(`job_watch`). The job's hooks during `pulumi up`, `make status` and `make checkpoint` ask them;
they build on the settings and the builders (the job APIs), never on the components.
"""
