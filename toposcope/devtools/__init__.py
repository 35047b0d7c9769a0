"""The development toolkit: local processes on loopback for the tests, the benchmarks and the
local stack (``make up``). Not part of the distribution: the wheel leaves this package out, and
no shipped module may import it.
"""
