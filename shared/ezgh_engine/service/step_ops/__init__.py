"""Step ops, one module per op over one executor (docs/architecture.md, "Step ops"):
`start`, `end` (complete, fail), `record`, `callback`, `cancel` (cancel, reject), each a
pure `plan` and `replan` over the template of `plan`; `executor` writes the plans; `checks`
says whether an invocation may still write. `service.steps` is the edge that calls them."""
