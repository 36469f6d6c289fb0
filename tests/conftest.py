"""Shared pytest fixtures."""

from nginx_fixture import nginx, nginx_server, remote_tree  # noqa: F401
