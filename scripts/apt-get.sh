#!/usr/bin/env bash
# apt-get as every script of the project runs it: the e2e tools' packages and the container tools
# may be installed at once (.ci/run builds the tools beside the base image), and dpkg takes one
# install at a time, so each waits for the other here instead of failing on dpkg's lock.
set -euo pipefail
exec flock /tmp/pytorch-distributed-apt.lock apt-get -o DPkg::Lock::Timeout=600 "$@"
