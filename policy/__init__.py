"""Guard-rail policy pack; a package so the tests can import `policy.rules` directly."""
