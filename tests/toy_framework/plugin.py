"""The toy framework's plugin module: importing it registers the framework
(``SPINN_PLUGINS=tests.toy_framework.plugin`` names it to every process).
Tests import the package and call :func:`tests.toy_framework.register`
instead, so that collecting them registers nothing."""

from __future__ import annotations

from tests.toy_framework import register

register()
