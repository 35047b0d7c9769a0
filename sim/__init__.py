"""toposcope.sim: a simulated heterogeneous cluster for demos, tests and benchmarks."""
