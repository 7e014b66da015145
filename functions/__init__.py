"""Thin Lambda handlers."""
