"""Sources: small readers of the outside world (sysfs, procfs, cgroups, NVML) with roots."""
