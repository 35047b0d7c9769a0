"""Alert and recording rules as configuration: templates, defaults and one renderer.

``templates/*.rules.yml`` are the rule files with placeholders for job selectors, the
cluster label, thresholds and durations; ``defaults.yaml`` is the default configuration (a
monitoring mixin's ``_config``). :mod:`toposcope.rules.render` fills one into the other,
:mod:`toposcope.rules.prometheusrule` wraps the groups for the Prometheus Operator, and
``toposcope rules export`` (:mod:`toposcope.rules.cli`) writes either. The repository's
``alerts/*.rules.yml`` are the default rendering, kept equal by a test.
"""
