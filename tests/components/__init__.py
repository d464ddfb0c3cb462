"""Tests of the Pulumi components and of the program under mocks; `s3_stack` the S3 stack they
and the policy tests share."""
