"""The `ezgh` command line tool."""
