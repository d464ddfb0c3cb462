"""Pure validators for the guard-rail policy pack, plus the thin adapters in `rules.pack`.

Every validator takes plain data (a resource type, a props dict, the policy's config) and returns
violation messages, so it can be unit-tested without starting the pack's gRPC server. Imports
inside this package are relative because the pack runs it as the top-level package `rules`
(Pulumi executes policy/__main__.py with policy/ on sys.path) while the tests import it as
`policy.rules`.
"""
