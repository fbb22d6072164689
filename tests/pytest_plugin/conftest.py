"""The `suite` fixture (defined with the plugin's main tests) for every test file here."""

from tests.pytest_plugin.test_pytest_plugin import suite  # noqa: F401
