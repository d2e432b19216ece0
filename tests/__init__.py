"""The test suite (a package, so its modules import tests.helpers and tests.toy_framework by one name)."""
