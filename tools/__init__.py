"""The user's commands besides Pulumi, each a module run with `python -m tools.NAME` (the
Makefile's targets): the offline render (`render`), the local run (`run_local`, with its
`local_backends/` and `supervisor`), `status`, `retrieve` (`make checkpoint`), `stack_image`, the
Pulumi CLI wrapper (`pulumi_run`) and the local S3 server (`s3_server`); `stack_cli` holds their
shared stack arguments and `containers/` podman's configuration. The one-machine cluster they may
run on is `cluster/`, below them; what both share about this machine is `machine/`."""
