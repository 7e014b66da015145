"""The local runtime behind `ezgh dev` and the tests: see `runtime.LocalRuntime`."""
