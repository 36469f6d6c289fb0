"""Shared pytest fixtures."""

from support.nginx_fixture import nginx, nginx_server, remote_tree  # noqa: F401
