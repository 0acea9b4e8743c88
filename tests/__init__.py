"""Mnemis's test suite, a package: shared code lives in ``tests.helpers`` and is imported as
``from tests.helpers.<module> import ...``; no test module imports another."""
