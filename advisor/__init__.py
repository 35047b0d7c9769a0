"""toposcope.advisor: loaders -> model -> policies -> recommendations -> formatters; applying.

* :mod:`.loaders`: where numbers come from (a PromQL API, or exporters scraped directly),
  one table row per query need, built from catalogue names;
* :mod:`.model`: the cluster as frozen dataclasses (topology, GPUs, workloads, capacity);
* :mod:`.policies`: the rules (numa-pinning, memory-migration, gpu-placement, job-migration,
  idle-release, config), each deciding only;
* :mod:`.recommendations`: the data every policy returns and every consumer reads;
* :mod:`.formatters`: reports as table, JSON, YAML, CSV, Markdown, HTML, and the dry run's
  ready-to-apply commands per resource manager;
* :mod:`.applying` and :mod:`.audit`: the one place that acts, with limits and a log,
  through the resource managers of :mod:`.rmclients`;
* :mod:`.service`, :mod:`.api`: ``toposcope advisor serve`` and its HTTP API;
* :mod:`.cli`, :mod:`.place_cli`: ``toposcope advise`` and ``toposcope place``.
"""
