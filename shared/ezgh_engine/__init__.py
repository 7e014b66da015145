"""The EZGH engine: the pure core, its AWS adapters, the services the Lambda handlers call,
and the local runtime behind `ezgh dev`."""
