"""Tests of the Pulumi program's components, settings and manifest builders."""
