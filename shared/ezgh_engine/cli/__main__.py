"""`python -m ezgh_engine.cli ...` runs the `ezgh` command."""

from ezgh_engine.cli.main import main

raise SystemExit(main())
