"""The core's fixtures these tests use (tests/conftest.py applies only below tests/)."""

from tests.conftest import redis_server

__all__ = ["redis_server"]
