"""Private internals of ezgh_workflows; not a public API."""
