"""toposcope.advisor: loaders -> model -> policies -> recommendations -> actuators (issue 4/6)."""
