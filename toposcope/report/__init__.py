"""The recommendation contract: what the advisor proposes and every other part reads.

:mod:`.recommendation` defines a recommendation and a report (kinds, targets, evidence,
estimated gain, the actions that would apply it) and their JSON; :mod:`.decoder` reads that
JSON back, checked, so the Dash app, the simulator's judge and users' own tools decode a
report one way.
"""
