"""Tests of the Pulumi components and the pure manifest builders."""
